"""Recent readings for the rules: cached slices of the store, with coverage checks."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..sources.base import Device
from ..store import Store
from .thresholds import Thresholds


def median(values: np.ndarray) -> float:
    """``np.median`` as a float, NaN for no values (numpy would warn); one partition, as
    ``np.median`` does inside, without its 10 µs of checks (the rules ask dozens of times a second)."""
    n = len(values)
    if not n:
        return math.nan
    k = n // 2
    part = np.partition(values, (k - 1, k, n - 1) if n > 1 else (0,))
    if part[-1] != part[-1]:  # NaN sorts last: the median is NaN, as numpy's
        return math.nan
    return float(part[k]) if n % 2 else float((part[k - 1] + part[k]) / 2)


def hold_weights(t: np.ndarray, end: float) -> np.ndarray:
    """Each reading counts until the next (the newest until ``end``), at most 4 median steps."""
    dt = np.diff(t, append=end)
    step = median(dt)
    return np.minimum(dt, 4 * step) if step > 0 else np.ones(len(t))


class Window:
    """The last seconds of each metric, read once per evaluation. Buffered metrics arrive up to 10 s
    late: each is judged up to where it is complete (``end``), one ``end`` for metrics compared."""

    def __init__(self, store: Store, now: float, stale_after_s: float, tolerance_s: float,
                 spans: dict | None = None,
                 complete: Callable[[object, str], float] | None = None, keys: tuple = ()) -> None:
        self.store, self.now, self.keys = store, now, keys  # keys: GPUs whose reads come together
        self.stale_after_s, self.tolerance_s = stale_after_s, tolerance_s
        self._read: dict[tuple, tuple[float, np.ndarray, np.ndarray]] = {}
        # widest reach (span + how far its end lies before now) per (device, metric), kept by the
        # caller between evaluations, so a metric's first read covers every later ask
        self.spans: dict[tuple, float] = {} if spans is None else spans
        self._complete = complete
        self._ends: dict[tuple, float] = {}

    def end(self, device: object, *metrics: str) -> float:
        """The newest time up to which every one of ``metrics`` of ``device`` is in the store."""
        return min((self._end(device, metric) for metric in metrics), default=self.now)

    def _end(self, device: object, metric: str) -> float:
        pair = (device, metric)
        if (end := self._ends.get(pair)) is None:
            until = self._complete(device, metric) if self._complete is not None else math.inf
            end = self._ends[pair] = min(self.now, until)
        return end

    def series(self, device: object, metric: str, span_s: float,
               end: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of the ``span_s`` seconds up to ``end`` (default: where the metric is
        complete), NaN dropped; may be short. One store read per metric; narrower spans slice it."""
        end = self._end(device, metric) if end is None else min(end, self.now)
        reach = span_s + (self.now - end)
        pair = (device, metric)
        read = self._read.get(pair)
        if read is None or read[0] < reach:
            widest = max(reach, self.spans.get(pair, reach))
            self.spans[pair] = widest
            # The rules ask each GPU in turn: the others' same metric comes in the same store call.
            pairs, cover = [pair], widest
            for key in self.keys:  # (and any whose own read is narrower than this ask)
                if key == device:
                    continue
                wide = span_s + (self.now - self._end(key, metric))
                if (held := self._read.get((key, metric))) is None or held[0] < wide:
                    pairs.append((key, metric))
                    cover = max(cover, wide, self.spans.get((key, metric), wide))
            got = self.store.series_many(pairs, self.now - cover, self.now)
            for each, (t, v) in zip(pairs, got, strict=True):
                self._read[each] = (cover, t, v)
            read = self._read[pair]
        _, t, v = read
        first, last = int(np.searchsorted(t, end - span_s, "left")), int(np.searchsorted(t, end, "right"))
        return t[first:last], v[first:last]

    def recent(self, device: object, metric: str, span_s: float, end: float | None = None):
        """(times, values) of the ``span_s`` seconds up to ``end`` if they span the whole window and
        end with a fresh reading, else None."""
        end = self._end(device, metric) if end is None else min(end, self.now)
        t, v = self.series(device, metric, span_s, end)
        covered = (len(t) >= 3 and t[0] <= end - span_s + self.tolerance_s
                   and t[-1] >= end - self.stale_after_s)
        return (t, v) if covered else None

    def mean(self, device: object, metric: str, span_s: float, end: float | None = None) -> float:
        """Time-weighted mean over the window up to ``end`` (NaN if not covered)."""
        end = self._end(device, metric) if end is None else min(end, self.now)
        if (got := self.recent(device, metric, span_s, end)) is None:
            return math.nan
        t, v = got  # at least three readings (``recent``)
        weight = hold_weights(t, end)
        return float(np.dot(v, weight) / weight.sum())


def held_for(t: np.ndarray, ok: np.ndarray, now: float) -> float:
    """Seconds the condition ``ok`` has held up to now (0 if the newest reading fails it)."""
    if not len(t) or not ok[-1]:
        return 0.0
    bad = np.flatnonzero(~ok)
    start = t[bad[-1] + 1] if len(bad) else t[0]
    return float(now - start)


@dataclass
class Context:
    """Everything one evaluation of the rules may look at."""

    now: float
    window: Window
    devices: list[Device]
    thresholds: Thresholds
    in_cell_s: float  # seconds a cell has been running; 0 if none
    gpus_in_use: set | None  # GPUs this kernel's processes use; None: unknown (all)
    attribution: str = "unknown"
    marks: list[tuple[float, str]] = field(default_factory=list)  # the newest at or before now
    memo: dict = field(default_factory=dict)  # what rules keep between evaluations
    stacks: object = None  # the main thread's stack samples (``stacks.StackSamples``), if any
    cell_end: bool = False  # evaluated at the end edge of a cell (or capture) that just ended

    def gpus(self, whole_only: bool = True) -> list[Device]:
        """Devices to judge (whole GPUs only unless told otherwise)."""
        return [d for d in self.devices if not (whole_only and d.parent is not None)]

    def used_gpus(self) -> list[Device]:
        """Whole GPUs this kernel uses (all of them when that cannot be told)."""
        return [d for d in self.gpus() if self.gpus_in_use is None or d.key in self.gpus_in_use]
