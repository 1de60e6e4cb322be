"""``nbgpu.mark`` and ``nbgpu.track``: labelled moments on every timeline."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import BadArgumentError
from ..sampler import Sampler
from ..sampler_thread import fetch_buffered, running_samplers
from .capture import active_captures, now_on, pick_sampler
from .summary import rows_frame, summarize

if TYPE_CHECKING:
    import pandas as pd


def mark(label: str) -> None:
    """Put a labelled mark on the timeline of every running sampler (None: no ``Out[]``)."""
    for s in running_samplers():
        s.mark(str(label))


class Tracker:
    """Iterates like the wrapped iterable, marking each iteration ("epoch 0", "epoch 1", …) on every
    timeline; ``nbgpu.track(range(n))``."""

    def __init__(self, iterable: Iterable | None, label: str = "epoch") -> None:
        if iterable is not None and not isinstance(iterable, Iterable):
            raise BadArgumentError(f"track() needs something to iterate (a range, a DataLoader), "
                                   f"got {iterable!r}")
        self.iterable = iterable
        self.label = str(label)
        self.sampler: Sampler | None = None  # the running one, from the first iteration on
        self.spans: list[tuple[int, str, float, float, str]] = []  # (i, mark, t0, t1, status)
        self._open: tuple[int, str, float] | None = None
        self._fetched_s = -math.inf  # the buffers were read up to here for a summary
        for cap in active_captures():
            cap.trackers.append(self)

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def begin(self, i: int) -> None:
        """Start iteration ``i``: close the previous one and mark this one on every timeline."""
        if self.sampler is None:
            self.sampler = pick_sampler()
        now = now_on(self.sampler)
        if self._open is not None:
            self.spans.append((*self._open, now, "done"))
        text = f"{self.label} {i}"
        mark(text)
        self._open = (i, text, now)

    def end(self, status: str = "done") -> None:
        """Close the running iteration, if any."""
        if self._open is not None:
            self.spans.append((*self._open, now_on(self.sampler), status))
            self._open = None

    def __iter__(self) -> Iterator[Any]:
        status = "done"
        try:
            for i, item in enumerate(self.iterable):
                self.begin(i)
                yield item
        except GeneratorExit:  # the loop stopped early (break or an exception in its body)
            status = "stopped"
            raise
        finally:
            self.end(status)

    def summary(self, per_gpu: bool = True) -> pd.DataFrame:
        """One row per iteration (and GPU): duration, memory, utilisation, power, energy…"""
        import pandas as pd

        if self.sampler is None or not self.spans:
            return pd.DataFrame()
        end = max(t1 for *_, t1, _ in self.spans)
        if end > self._fetched_s and fetch_buffered(self.sampler, end):
            self._fetched_s = end
        results = [(i, text, summarize(self.sampler.timeline, t0, t1,
                                       status="ok" if status == "done" else status))
                   for i, text, t0, t1, status in self.spans]
        return rows_frame([{"iteration": i, "mark": text, **row} for i, text, result in results
                           for row in (result.rows if per_gpu else [result.combined])])


track = Tracker
