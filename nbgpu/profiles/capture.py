"""``nbgpu.capture()``: the GPU profile of a block of code."""

from __future__ import annotations

import contextlib
import math
import time
import traceback
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..diagnostics import stacks
from ..diagnostics.engine import cell_alerts, register_activity
from ..errors import BadArgumentError
from ..hooks import view
from ..peaks import match_torch, torch_cuda, torch_uuid
from ..sampler import Sampler, check_sampler
from ..sampler_thread import running_samplers, wait_for_edge
from ..sources.base import check_gpus
from ..timeline import Timeline
from .energy import COUNTER_MIN_S
from .render import NO_GPU_LINE, no_gpu, static_html
from .render import one_line as line_of
from .summary import Summary, as_count, rows_frame, selected, summarize

if TYPE_CHECKING:
    import pandas as pd

OWN_SAMPLER_INTERVAL_S = 0.2
FAST_MEMORY_EVERY_S = 0.01  # memory used is read this often while a capture is open
# A start reads the energy counter only if its newest reading is older than this (a long block's anchor).
COUNTER_FRESH_S = 2.0

_active: list[Capture] = []  # open captures, outermost first


def pick_sampler() -> Sampler | None:
    """The kernel's shared sampler if it runs, else the most recently started running one."""
    from .. import session

    shared = session.shared_sampler()
    if shared is not None and shared.running:
        return shared
    return max(running_samplers(), key=lambda s: s.started_at or 0.0, default=None)


def now_on(sampler: Sampler | None) -> float:
    """Now on ``sampler``'s clock, the one its readings and marks are stamped with."""
    return sampler.now() if sampler is not None else time.time()


def active_captures() -> list[Capture]:
    """Captures currently open, outermost first."""
    return list(_active)


# The diagnostics' idle rule judges while a capture on its sampler is open.
register_activity(lambda sampler: any(c.sampler is sampler for c in list(_active)))


def status_of(exc: BaseException | None) -> str:
    """"ok", "interrupted" (KeyboardInterrupt) or "failed" (any other exception)."""
    if exc is None:
        return "ok"
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"


def _torch_peaks(cuda: Any, i: int, floor: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """PyTorch's peak allocated and reserved bytes of device ``i``, at least ``floor``'s."""
    return (max(float(cuda.max_memory_allocated(i)), floor[0]),
            max(float(cuda.max_memory_reserved(i)), floor[1]))


class Capture:
    """The GPU profile of one block: timeline, per-GPU summary, marks, alerts, report. Without
    ``sampler`` it reads the running one, else starts its own (``source``, ``interval``)."""

    def __init__(self, sampler: Sampler | None = None, *, source: object = None,
                 interval: float | None = None, gpus: list | None = None) -> None:
        check_sampler(sampler, source, interval)
        self.sampler = sampler
        self._source, self._interval = source, interval
        self._asked_gpus = gpus
        self.gpus = self._checked_gpus() if sampler is not None else None  # None: all
        self.start_time = self.end_time = math.nan
        self.status = "running"
        self.error: str | None = None
        self.owns_sampler = False
        self.trackers: list = []
        self._torch_floor: dict[int, tuple[float, float]] = {}  # peaks before a nested block reset them
        self._torch_reserved_start: dict[int, float] = {}
        self._torch: list[dict] = []  # PyTorch's figures of the finished block, per device index
        self._fast = contextlib.ExitStack()
        self._kept: dict[str, object] = {}  # results of the finished block
        self._stacks: int | None = None  # the token of the stack sampling held (diagnostics.stacks)
        self.line_offset = 0  # added to the block's line numbers (1 under a %%gpumon line)
        self.too_short: list[str] = []  # window rules the finished block was too short to judge

    def __repr__(self) -> str:
        dur = "running" if math.isnan(self.end_time) else f"{self.duration_s:.2f}s"
        return f"<nbgpu.Capture block {dur} {self.status}>"

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> Capture:
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.finish(status_of(exc), exc)
        return False  # the block's exception, if any, goes on unchanged

    def start(self) -> Capture:
        """Note the start time (a counter reading if none is recent); start a sampler if none runs."""
        if self.sampler is None:
            self.sampler = pick_sampler()
            if self.sampler is not None and (self._source is not None or self._interval is not None):
                asked = "source" if self._source is not None else "interval"
                raise BadArgumentError(
                    f"capture({asked}=...) needs a sampler of its own, but {self.sampler!r} is "
                    "already running; pass capture(sampler=...) to use it, or stop it first")
            if self.sampler is None:
                self.sampler = Sampler(self._source or "auto", self._interval or OWN_SAMPLER_INTERVAL_S)
            self.gpus = self._checked_gpus()  # before a sampler of its own starts
        if not self.sampler.running:
            self.sampler.start()
            self.owns_sampler = True
        if (cuda := torch_cuda()) is not None:
            for i in range(cuda.device_count()):
                for cap in _active:  # resetting the counters must not lose an outer block's peaks
                    cap._torch_floor[i] = _torch_peaks(cuda, i, cap._torch_floor.get(i, (0.0, 0.0)))
                self._torch_reserved_start[i] = float(cuda.memory_reserved(i))
                cuda.reset_peak_memory_stats(i)
        self._fast.enter_context(self.sampler.fast_memory(FAST_MEMORY_EVERY_S))
        self.start_time = self.sampler.now()
        self._stacks = stacks.hold(self.sampler, self.line_offset)
        last, lost = self.sampler.store.last, self.sampler.lost
        if any(not self.start_time - last(d.key, "energy_j")[0] <= COUNTER_FRESH_S
               for d in self.sampler.devices if d.key not in lost):  # no recent counter reading
            self.sampler.request("energy")
        _active.append(self)
        return self

    def _checked_gpus(self) -> list | None:
        keep = check_gpus(self._asked_gpus, [d.key for d in self.sampler.devices if d.parent is None])
        return None if keep is None else list(keep)

    def finish(self, status: str = "ok", exc: BaseException | None = None, wait: bool = True) -> None:
        """Note the end time and status; with ``wait``, give the sampler a moment to read the edge."""
        if not math.isnan(self.end_time):
            return
        self.end_time = now_on(self.sampler)
        self.status = status
        if exc is not None:
            self.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if self in _active:
            _active.remove(self)
        with contextlib.suppress(Exception):
            self._torch_finish()
        if (sampler := self.sampler) is None:
            return
        stacks.release(sampler, self._stacks)
        self.split()  # kept now: the sampler does not keep its stack samples long
        if self.end_time - self.start_time >= COUNTER_MIN_S:
            sampler.request("energy")
        if (engine := sampler.diagnostics) is not None:
            engine.judge_cell_end()  # the rules judge the block at its end edge, however short
        sampler.request("edge")  # the buffers drained up to the end, whatever its length
        if wait or self.owns_sampler:
            wait_for_edge(sampler, self.end_time,
                          also=None if engine is None else lambda: engine.cell_end_pending)
        self._fast.close()
        if self.owns_sampler:
            sampler.stop()

    def _torch_finish(self) -> None:
        if (cuda := torch_cuda()) is None:
            return
        for i in range(cuda.device_count()):
            allocated, reserved = _torch_peaks(cuda, i, self._torch_floor.get(i, (0.0, 0.0)))
            self._torch.append({
                "torch_peak_allocated_bytes": allocated, "torch_peak_reserved_bytes": reserved,
                "torch_allocated_end_bytes": float(cuda.memory_allocated(i)),
                "torch_reserved_end_bytes": float(cuda.memory_reserved(i)),
                "peak_reserved_bytes": reserved,  # these two: what summarize(allocator=) folds in
                "reserved_start_bytes": self._torch_reserved_start.get(i, 0.0),
                "torch_uuid": torch_uuid(cuda, i)})

    # -- results ----------------------------------------------------------------------------
    @property
    def duration_s(self) -> float:
        t0, t1 = self._range()
        return t1 - t0

    def _range(self) -> tuple[float, float]:
        return self.start_time, (now_on(self.sampler) if math.isnan(self.end_time) else self.end_time)

    @property
    def window(self) -> Timeline:
        """The sampler's timeline narrowed to this block (all GPUs)."""
        return self.sampler.timeline.between(*self._range())

    @property
    def timeline(self) -> Timeline:
        """The block's ``Timeline`` (its GPUs only), like ``Sampler.timeline``: ``.to_pandas()``."""
        return Timeline(self.sampler.store, self.devices(), *self._range())

    def devices(self) -> list:
        """The block's GPUs (``gpus``, a listed card's MIG slices with it)."""
        devices = self.sampler.devices if self.sampler is not None else []
        return [d for d in devices if selected(d.key, self.gpus, d.parent)]

    def gpu_keys(self) -> list:
        """Keys of the block's GPUs."""
        return [d.key for d in self.devices()]

    def series(self, metrics: tuple[str, ...]) -> dict[object, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """(epoch seconds, values) in the block of each metric of each of its GPUs."""
        def read() -> dict:
            keys, pairs = self.gpu_keys(), [(g, m) for g in self.gpu_keys() for m in metrics]
            got = iter(self.sampler.store.series_many(pairs, *self._range()) if pairs else ())
            return {g: {m: next(got) for m in metrics} for g in keys}
        return self._once(f"series {metrics}", read)

    @property
    def marks(self) -> list[tuple[float, str]]:
        """(epoch seconds, label) of the marks inside the block."""
        return self.window.marks()

    def _once(self, name: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, kept under ``name`` once the block has finished (its figures are final)."""
        if name in self._kept:
            return self._kept[name]
        value = compute()
        if not math.isnan(self.end_time):
            self._kept[name] = value
        return value

    def summarized(self) -> Summary:
        """The block's ``Summary`` (per-GPU rows and the combined row)."""
        return self._once("summary", self._summarize)

    def _summarize(self) -> Summary:
        # PyTorch's figures, matched to GPUs by UUID (or by order where safe)
        torch_rows = match_torch(self.devices(), self._torch, "torch_uuid") if self._torch else {}
        result = summarize(self.sampler.timeline, *self._range(), gpus=self.gpus, status=self.status,
                           allocator=torch_rows)
        alerts = self.alerts
        for row in result.rows:
            for col in ("torch_peak_allocated_bytes", "torch_peak_reserved_bytes",
                        "torch_allocated_end_bytes", "torch_reserved_end_bytes") if torch_rows else ():
                row[col] = as_count(torch_rows.get(row["gpu"], {}).get(col, math.nan))
            row["alerts"] = "; ".join(f"{a.severity}: {a.message}" for a in alerts
                                      if a.gpu is None or a.gpu == row["gpu"])
        if torch_rows and result.combined:  # over all GPUs: the largest peak, the sum held at the end
            result.combined.update(
                torch_peak_allocated_bytes=max(r["torch_peak_allocated_bytes"] for r in result.rows),
                torch_reserved_end_bytes=sum(r["torch_reserved_end_bytes"] for r in result.rows))
        return result

    @property
    def summary_rows(self) -> list[dict]:
        """``summary`` as plain dicts (epoch-second ``start``/``end``)."""
        return self.summarized().rows

    @property
    def summary(self) -> pd.DataFrame:
        """One row per GPU (see ``nbgpu.profiles.summary``), plus torch and alert columns."""
        if no_gpu(self):
            warnings.warn(NO_GPU_LINE, UserWarning, stacklevel=2)
        return self._once("frame", lambda: rows_frame(self.summary_rows)).copy()

    @property
    def totals(self) -> dict[str, object]:
        """One row for all GPUs together, as defined in docs/profiles.md."""
        return dict(self.summarized().combined)

    @property
    def alerts(self) -> list:
        """Alerts whose condition held inside the block, as seen there (empty if none run)."""
        def find() -> list:
            found, self.too_short = cell_alerts(self.sampler, *self._range(), self.split(),
                                                not math.isnan(self.end_time))
            parents = {d.key: d.parent for d in self.sampler.devices}
            return [a for a in found if a.gpu is None or selected(a.gpu, self.gpus, parents.get(a.gpu))]
        try:
            return self._once("alerts", find)
        except Exception:
            return []

    def split(self) -> stacks.Split | None:
        """Where the main thread's time went in the block (None: no stack samples)."""
        got = stacks.samples_of(self.sampler) if self.sampler is not None else None
        return self._once("split", lambda: got.split(*self._range()) if got is not None else None)

    def where(self) -> pd.DataFrame:
        """Where the main thread was: a row per category (``category``, ``seconds``, ``share``);
        ``attrs["top_line"]``: the cell line most time went to (``line``, ``text``, ``share``)."""
        return stacks.where_frame(self.split())

    @property
    def iterations(self) -> pd.DataFrame:
        """Per-iteration summary rows of every ``nbgpu.track`` loop run inside the block."""
        import pandas as pd

        frames = [t.summary() for t in self.trackers]
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def one_line(self) -> str:
        """The short summary line, e.g. ``GPU0 1m12s · util 87 % · peak 41.2 GiB (+3.1 GiB) · …``."""
        sim = " · SIMULATED" if self.sampler is not None and self.sampler.simulated else ""
        return self._once("line", lambda: line_of(self.summarized(), self.status) + sim)

    def report(self) -> None:
        """Display the cell report (interactive chart + static fallbacks), once (None: no second copy)."""
        from IPython.display import display

        display(view("cell_report", self))

    def _repr_html_(self) -> str:
        return static_html(self)


capture = Capture  # ``with nbgpu.capture() as cap: ...`` then ``cap.summary``, ``cap.report()``
