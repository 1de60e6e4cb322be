"""Incremental min/max buckets of one sparkline, kept between panel refreshes.

Buckets sit on a fixed grid of absolute time (``width_s`` each, about 2 pixels), so a
bucket that is complete never changes: each refresh reads from the store only the rows
of the last few buckets (those that late rows from NVML's sample buffers may still
reach) and reduces them with vectorised numpy. The cost of a refresh follows the new
rows, not the window's length or the sample rate.
"""

from __future__ import annotations

import numpy as np

from ..decimate import Buckets, bucket_minmax

_FIELDS = ("index", "count", "first_t", "last_t", "tmin", "vmin", "tmax", "vmax")


def _empty() -> Buckets:
    return bucket_minmax(np.empty(0), np.empty(0), np.empty(0, np.int64))


def _join(a: Buckets, b: Buckets) -> Buckets:
    return Buckets(*(np.concatenate([getattr(a, f), getattr(b, f)]) for f in _FIELDS))


def _take(b: Buckets, keep: np.ndarray) -> Buckets:
    return Buckets(*(getattr(b, f)[keep] for f in _FIELDS))


class SparkSet:
    """The buckets of many sparklines at once: one vectorised reduction per refresh.

    Args:
        traces: how many sparklines.
        width_s: seconds per bucket (the span over the number of buckets).
        settle_s: rows may arrive this late (buffered samples); buckets newer than that
            are read again at the next refresh.

    The traces share one bucket width, so the rows of every trace are reduced together
    (keyed by trace and bucket) instead of a handful of numpy calls per trace.
    """

    def __init__(self, traces: int, width_s: float, settle_s: float) -> None:
        self.traces = traces
        self.width_s = float(width_s)
        self.settle_s = float(settle_s)
        self._final = _empty()
        self._final_trace = np.empty(0, np.int64)
        self._final_before: int | None = None

    def start(self, now: float, span_s: float) -> float:
        """Epoch seconds from which the rows must be read at this refresh."""
        first = int(np.floor((now - span_s) / self.width_s))
        begin = first if self._final_before is None else max(first, self._final_before)
        return begin * self.width_s

    def update(self, reads: list[tuple[np.ndarray, np.ndarray]], now: float, span_s: float
               ) -> tuple[np.ndarray, Buckets]:
        """(trace of each bucket, buckets) in the window, sorted by trace then time.

        ``reads[i]`` are trace ``i``'s rows from ``start(now, span_s)`` to ``now``.
        """
        w = self.width_s
        first = int(np.floor((now - span_s) / w))
        begin = round(self.start(now, span_s) / w)
        lengths = np.fromiter((len(t) for t, _ in reads), np.int64, len(reads))
        t = np.concatenate([r[0] for r in reads]) if reads else np.empty(0)
        v = np.concatenate([r[1] for r in reads]) if reads else np.empty(0)
        trace = np.repeat(np.arange(len(reads)), lengths)
        per = int(np.floor(now / w)) - first + 2  # buckets a trace can have in the window
        rel = np.clip(np.floor(t / w).astype(np.int64) - first, 0, per - 1)
        fresh = bucket_minmax(t, v, trace * per + rel)
        fresh_trace, fresh_bucket = fresh.index // per, fresh.index % per + first
        fresh = Buckets(fresh_bucket, *(getattr(fresh, f) for f in _FIELDS[1:]))
        keep_old = self._final.index >= first
        old, old_trace = _take(self._final, keep_old), self._final_trace[keep_old]
        final_before = int(np.floor((now - self.settle_s) / w))
        done = fresh.index < final_before
        self._final = _join(old, _take(fresh, done))
        self._final_trace = np.concatenate([old_trace, fresh_trace[done]])
        self._final_before = max(final_before, begin)
        both = _join(old, fresh)
        both_trace = np.concatenate([old_trace, fresh_trace])
        order = np.argsort(both_trace * per + (both.index - first), kind="stable")
        return both_trace[order], _take(both, order)

    def held(self) -> int:
        """Buckets kept between refreshes (bounded by traces × buckets in the window)."""
        return len(self._final)


def points_of_all(trace: np.ndarray, b: Buckets, traces: int, now: float, span_s: float,
                  gap_s: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Line points of every trace: a list of (x, values), x in seconds before ``now``.

    Per bucket its min and max in time order; a NaN where samples are more than ``gap_s``
    apart, so missing data shows as a gap.
    """
    if len(b) == 0:
        return [(np.empty(0), np.empty(0))] * traces
    lo_first = b.tmin <= b.tmax
    t = np.column_stack([np.where(lo_first, b.tmin, b.tmax), np.where(lo_first, b.tmax, b.tmin)]).ravel()
    v = np.column_stack([np.where(lo_first, b.vmin, b.vmax), np.where(lo_first, b.vmax, b.vmin)]).ravel()
    tr = np.repeat(trace, 2)
    jumps = np.flatnonzero((b.first_t[1:] - b.last_t[:-1] > gap_s) & (trace[1:] == trace[:-1]))
    if len(jumps):
        at = 2 * (jumps + 1)
        t = np.insert(t, at, b.last_t[jumps] + gap_s / 2)
        v = np.insert(v, at, np.nan)
        tr = np.insert(tr, at, trace[jumps])
    keep = t >= now - span_s
    t, v, tr = t[keep] - now, v[keep], tr[keep]
    cut = np.searchsorted(tr, np.arange(traces + 1))
    return [(t[cut[i]:cut[i + 1]], v[cut[i]:cut[i + 1]]) for i in range(traces)]
