"""The sparkline buckets in the shapes the tests compare them in, over ``SparkSet``'s own API.

The panel feeds a ``SparkSet`` the store's new rows with their trace each (``add_rows``) and
reads line points at once (``points``). The tests also compare the kept buckets themselves
with a fresh reduction (``bucket_minmax``, the plain definition), and the points trace by trace;
these helpers give them those shapes from the same calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nbgpu.widgets.spark import COUNT, FIRST, KEPT_FIELDS, SparkSet, points_of_cells


@dataclass(frozen=True)
class Buckets:
    """Per non-empty bucket: its number, sample count, first/last time, min and max points."""

    index: np.ndarray
    count: np.ndarray
    first_t: np.ndarray
    last_t: np.ndarray
    tmin: np.ndarray
    vmin: np.ndarray
    tmax: np.ndarray
    vmax: np.ndarray

    def __len__(self) -> int:
        return len(self.index)


def bucket_minmax(t: np.ndarray, v: np.ndarray, bucket: np.ndarray) -> Buckets:
    """The definition, one run of equal ``bucket`` numbers at a time: its count, first and last
    time, first min and first max (NaN skipped; an all-NaN run: its first time, NaN)."""
    v = np.asarray(v, dtype=np.float64)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]]) if len(t) else np.empty(0, np.int64)
    rows = []
    for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(t)][:len(starts)], strict=True):
        seg = v[a:b]
        lo, hi = (a, a) if np.isnan(seg).all() else (a + int(np.nanargmin(seg)), a + int(np.nanargmax(seg)))
        rows.append((bucket[a], b - a, t[a], t[b - 1], t[lo], v[lo], t[hi], v[hi]))
    cols = list(zip(*rows, strict=True)) if rows else [()] * 8
    return Buckets(np.asarray(cols[0], np.int64), np.asarray(cols[1], np.int64),
                   *(np.asarray(c, np.float64) for c in cols[2:]))


def update_packed(sset: SparkSet, lengths: np.ndarray, t: np.ndarray, v: np.ndarray, now: float,
                  span_s: float) -> tuple[np.ndarray, Buckets]:
    """Add new rows (``lengths[i]`` rows of trace ``i``, trace after trace); return the window's
    buckets as (trace of each bucket, ``Buckets``), by trace then time."""
    trace = np.repeat(np.arange(len(lengths)), lengths)
    first, last = sset.add_rows(trace, t, v, now, span_s)
    trace, index, cells = sset.window(first, last)
    return trace, Buckets(index, cells[:, COUNT].astype(np.int64), *cells[:, FIRST:].T)


def update(sset: SparkSet, reads: list[tuple[np.ndarray, np.ndarray]], now: float, span_s: float
           ) -> tuple[np.ndarray, Buckets]:
    """``update_packed`` of ``reads[i]``, trace ``i``'s new rows (time-sorted)."""
    lengths = np.fromiter((len(t) for t, _ in reads), np.int64, len(reads))
    t = np.concatenate([r[0] for r in reads]) if reads else np.empty(0)
    v = np.concatenate([r[1] for r in reads]) if reads else np.empty(0)
    return update_packed(sset, lengths, t, v, now, span_s)


def points_packed(trace: np.ndarray, b: Buckets, traces: int, now: float, span_s: float,
                  gap_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Line points of ``Buckets`` as one flat run: (points per trace, x, values)."""
    cells = np.column_stack([b.count, b.first_t, b.last_t, b.tmin, b.vmin, b.tmax, b.vmax]) \
        if len(b) else np.empty((0, len(KEPT_FIELDS)))
    return points_of_cells(trace, cells, traces, now, span_s, gap_s)


def points_of_all(trace: np.ndarray, b: Buckets, traces: int, now: float, span_s: float,
                  gap_s: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """``points_packed`` cut per trace: a list of (x, values), x in seconds before ``now``."""
    lengths, x, v = points_packed(trace, b, traces, now, span_s, gap_s)
    ends = np.cumsum(lengths)
    return [(x[e - n:e], v[e - n:e]) for n, e in zip(lengths.tolist(), ends.tolist(), strict=True)]
