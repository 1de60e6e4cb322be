"""Min/max decimation for display: peaks stay visible however many raw points there are."""

from __future__ import annotations

import numpy as np


def _first_extremes(v: np.ndarray, bucket: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per run of equal ``bucket`` numbers: its start, its end, the first index of its min and of
    its max (NaN skipped; an all-NaN run: its start)."""
    n = len(v)
    edge = np.empty(n, bool)
    edge[0] = True
    np.not_equal(bucket[1:], bucket[:-1], out=edge[1:])
    starts = np.flatnonzero(edge)
    ends = np.append(starts[1:], n)
    nan = np.isnan(v)
    pos = positions(n)
    out = [starts, ends]
    for reduce, fill in ((np.minimum, np.inf), (np.maximum, -np.inf)):
        ext = reduce.reduceat(np.where(nan, fill, v) if nan.any() else v, starts)
        first = np.minimum.reduceat(np.where(v == np.repeat(ext, ends - starts), pos, n), starts)
        out.append(np.where(first == n, starts, first))
    return tuple(out)


def bucket_cells(t: np.ndarray, v: np.ndarray, bucket: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per run of equal ``bucket`` numbers in NaN-free ``v``: (bucket numbers, rows of count, first
    and last time, time and value of the first min, of the first max)."""
    starts, ends, imin, imax = _first_extremes(v, bucket)
    cells = np.column_stack([ends - starts, t[starts], t[ends - 1], t[imin], v[imin], t[imax], v[imax]])
    return bucket[starts], cells


_kept_positions = np.arange(0)


def positions(n: int) -> np.ndarray:
    """``np.arange(n)`` as a read-only view of one kept array: a refresh asks for the same few."""
    global _kept_positions
    if n > len(_kept_positions):
        _kept_positions = np.arange(max(2 * n, 4096))
        _kept_positions.flags.writeable = False
    return _kept_positions[:n]


def decimate_minmax(t: np.ndarray, v: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Keep the min and max of each of ``buckets`` equal time slices: about 2 points a bucket."""
    n = len(t)
    if n <= 2 * buckets or buckets <= 0:
        return t, v
    edges = np.linspace(t[0], t[-1], buckets + 1)
    idx = np.clip(np.searchsorted(edges, t, "right") - 1, 0, buckets - 1)
    _, _, imin, imax = _first_extremes(np.asarray(v, dtype=np.float64), idx)
    keep = np.unique(np.concatenate([imin, imax]))
    return t[keep], v[keep]
