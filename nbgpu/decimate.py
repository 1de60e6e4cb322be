"""Min/max decimation for display: peaks stay visible however many raw points there are."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


def _run_edges(bucket: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Where each run of equal ``bucket`` numbers starts (a mask and indices) and ends."""
    n = len(bucket)
    edge = np.empty(n, bool)
    edge[0] = True
    np.not_equal(bucket[1:], bucket[:-1], out=edge[1:])
    starts = np.flatnonzero(edge)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = n
    return edge, starts, ends


def _runs(v: np.ndarray, bucket: np.ndarray):
    """Run starts and ends of equal ``bucket`` numbers, the first min and max index of each,
    and which runs are all NaN (their min and max index is the run's start)."""
    n = len(v)
    edge, starts, ends = _run_edges(bucket)
    nan = np.isnan(v)
    has_nan = bool(nan.any())
    vmin = np.minimum.reduceat(np.where(nan, np.inf, v) if has_nan else v, starts)
    vmax = np.maximum.reduceat(np.where(nan, -np.inf, v) if has_nan else v, starts)
    seg = np.cumsum(edge) - 1  # each sample's run
    pos = np.arange(n)
    # The first index of each run where the value is its min (max); n where it has none (all NaN).
    imin = np.minimum.reduceat(np.where(v == vmin[seg], pos, n), starts)
    imax = np.minimum.reduceat(np.where(v == vmax[seg], pos, n), starts)
    if not has_nan:
        return starts, ends, imin, imax, np.zeros(len(starts), bool)
    empty = imin == n
    return starts, ends, np.where(empty, starts, imin), np.where(empty, starts, imax), empty


def bucket_minmax(t: np.ndarray, v: np.ndarray, bucket: np.ndarray) -> Buckets:
    """Reduce time-sorted samples to their buckets; ``bucket`` is each sample's bucket number."""
    if len(t) == 0:
        empty = np.empty(0)
        return Buckets(np.empty(0, np.int64), np.empty(0, np.int64), *([empty] * 6))
    v = np.asarray(v, dtype=np.float64)
    starts, ends, imin, imax, empty = _runs(v, bucket)
    vmin, vmax = v[imin], v[imax]
    if empty.any():
        vmin, vmax = np.where(empty, np.nan, vmin), np.where(empty, np.nan, vmax)
    return Buckets(np.asarray(bucket[starts], np.int64), ends - starts, t[starts], t[ends - 1],
                   t[imin], vmin, t[imax], vmax)


def bucket_cells(t: np.ndarray, v: np.ndarray, bucket: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``bucket_minmax`` as (bucket numbers, one row of fields per bucket), for NaN-free ``v``."""
    n = len(v)
    _, starts, ends = _run_edges(bucket)
    sizes = ends - starts
    vmin = np.minimum.reduceat(v, starts)
    vmax = np.maximum.reduceat(v, starts)
    pos = positions(n)
    imin = np.minimum.reduceat(np.where(v == np.repeat(vmin, sizes), pos, n), starts)
    imax = np.minimum.reduceat(np.where(v == np.repeat(vmax, sizes), pos, n), starts)
    cells = np.empty((len(starts), 7))
    cells[:, 0] = sizes
    cells[:, 1] = t[starts]
    cells[:, 2] = t[ends - 1]
    cells[:, 3] = t[imin]
    cells[:, 4] = v[imin]
    cells[:, 5] = t[imax]
    cells[:, 6] = v[imax]
    return bucket[starts], cells


def _counted(n: int) -> np.ndarray:
    """``np.arange(n)`` that cannot be written to (views of it are handed out)."""
    out = np.arange(n)
    out.flags.writeable = False
    return out


_kept_positions = _counted(4096)


def positions(n: int) -> np.ndarray:
    """``np.arange(n)``, as a read-only view of one kept array while that is long enough:
    the panel asks for the same few hundred positions at every refresh."""
    global _kept_positions
    if n > len(_kept_positions):
        _kept_positions = _counted(2 * n)
    return _kept_positions[:n]


def decimate_minmax(t: np.ndarray, v: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the min and max of each of ``buckets`` equal time slices: about 2 points a bucket."""
    n = len(t)
    if n <= 2 * buckets or buckets <= 0:
        return t, v
    edges = np.linspace(t[0], t[-1], buckets + 1)
    idx = np.clip(np.searchsorted(edges, t, "right") - 1, 0, buckets - 1)
    _, _, imin, imax, _ = _runs(np.asarray(v, dtype=np.float64), idx)
    keep = np.unique(np.concatenate([imin, imax]))
    return t[keep], v[keep]
