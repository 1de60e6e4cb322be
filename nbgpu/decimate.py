"""Min/max decimation for display: peaks stay visible however many raw points there are.

Both functions are vectorised (``np.minimum.reduceat`` over bucket runs), so their cost
grows with the number of points, never with a Python loop per bucket.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Buckets:
    """Per non-empty bucket: its number, sample count, first/last time, min and max points.

    ``tmin``/``vmin`` and ``tmax``/``vmax`` are the time and value of the first minimum and
    the first maximum of the bucket; NaN values are ignored (an all-NaN bucket has NaN
    there and its first sample's time).
    """

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


def _arg_first(hit: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """Index of the first True of each run starting at ``starts`` (n where the run has none)."""
    pos = np.where(hit, np.arange(n), n)
    return np.minimum.reduceat(pos, starts)


def _runs(v: np.ndarray, bucket: np.ndarray):
    """Run starts and ends of equal ``bucket`` numbers, the first min and max index of each,
    and which runs are all NaN (their min and max index is the run's start)."""
    n = len(v)
    starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    ends = np.r_[starts[1:], n]
    nan = np.isnan(v)
    vmin = np.minimum.reduceat(np.where(nan, np.inf, v), starts)
    vmax = np.maximum.reduceat(np.where(nan, -np.inf, v), starts)
    seg = np.repeat(np.arange(len(starts)), ends - starts)
    imin = _arg_first(v == vmin[seg], starts, n)
    imax = _arg_first(v == vmax[seg], starts, n)
    empty = imin == n
    return starts, ends, np.where(empty, starts, imin), np.where(empty, starts, imax), empty


def bucket_minmax(t: np.ndarray, v: np.ndarray, bucket: np.ndarray) -> Buckets:
    """Reduce time-sorted samples to their buckets; ``bucket`` is each sample's bucket number.

    ``bucket`` must be non-decreasing (it is for sorted times and a fixed bucket width).
    """
    if len(t) == 0:
        empty = np.empty(0)
        return Buckets(np.empty(0, np.int64), np.empty(0, np.int64), *([empty] * 6))
    v = np.asarray(v, dtype=np.float64)
    starts, ends, imin, imax, empty = _runs(v, bucket)
    vmin = np.where(empty, np.nan, v[imin])
    vmax = np.where(empty, np.nan, v[imax])
    return Buckets(np.asarray(bucket[starts], np.int64), ends - starts, t[starts], t[ends - 1],
                   t[imin], vmin, t[imax], vmax)


def decimate_minmax(t: np.ndarray, v: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the min and max of each of ``buckets`` equal time slices: about 2 points a bucket.

    Peaks stay visible however many raw points there are; an all-NaN slice keeps its first
    point (NaN), so gaps stay gaps. Points come back in time order, each once.
    """
    n = len(t)
    if n <= 2 * buckets or buckets <= 0:
        return t, v
    edges = np.linspace(t[0], t[-1], buckets + 1)
    idx = np.clip(np.searchsorted(edges, t, "right") - 1, 0, buckets - 1)
    _, _, imin, imax, _ = _runs(np.asarray(v, dtype=np.float64), idx)
    keep = np.unique(np.concatenate([imin, imax]))
    return t[keep], v[keep]
