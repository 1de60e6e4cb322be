"""Min/max buckets of many sparklines, kept between refreshes on a fixed grid of time: a refresh
merges only the rows the store gained (late ones too), so its cost follows the new rows."""

from __future__ import annotations

import math

import numpy as np

from ..decimate import bucket_cells

# What a grid cell keeps (``decimate.Buckets``' fields less the bucket number: its place).
KEPT_FIELDS = ("count", "first_t", "last_t", "tmin", "vmin", "tmax", "vmax")
COUNT, FIRST, LAST, TMIN, VMIN, TMAX, VMAX = range(len(KEPT_FIELDS))
# An empty cell: merging a fresh cell into it keeps the fresh one's fields, with no test.
_EMPTY = np.array([0.0, np.inf, -np.inf, np.inf, np.inf, np.inf, -np.inf])


class SparkSet:
    """The buckets (``width_s`` seconds each) of ``traces`` sparklines as one ring array (trace ×
    bucket × field); ``ahead``: rows over a bucket newer than ``now`` came and were not kept."""

    def __init__(self, traces: int, width_s: float) -> None:
        self.traces = traces
        self.width_s = float(width_s)
        self.ahead = False
        self._grid = np.zeros((traces, 0, len(KEPT_FIELDS)))  # trace × ring column × field
        self._flat = self._grid.reshape(-1, len(KEPT_FIELDS))  # the grid as one cell a row (a view)
        self._bucket = np.zeros(0, np.int64)  # bucket number each ring column holds
        self._held = 0

    def start(self, now: float, span_s: float) -> float:
        """Epoch seconds where the window starts: the first update's rows begin there."""
        return math.floor((now - span_s) / self.width_s) * self.width_s

    def add_rows(self, trace: np.ndarray, t: np.ndarray, v: np.ndarray, now: float, span_s: float
                 ) -> tuple[int, int]:
        """Merge new rows (by trace, time-sorted within one, no NaN) into their cells; rows
        before the window are dropped. Returns the window's first and last bucket numbers."""
        w = self.width_s
        first, last = math.floor((now - span_s) / w), math.floor(now / w)
        self._prepare(first, last)
        ring = self._bucket.size
        bucket = np.floor(t / w).astype(np.int64)
        if len(bucket) and (bucket.min() < first or bucket.max() > last + 1):
            self.ahead = self.ahead or bool(bucket.max() > last + 1)
            keep = (bucket >= first) & (bucket <= last + 1)
            t, v, trace, bucket = t[keep], v[keep], trace[keep], bucket[keep]
        if len(t):
            self._merge(*bucket_cells(t, np.asarray(v, np.float64), trace * ring + bucket % ring))
        return first, last

    def points(self, first: int, last: int, now: float, span_s: float, gap_s: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``points_of_cells`` of the window's cells (buckets ``first`` to ``last``)."""
        trace, _, cells = self.window(first, last)
        return points_of_cells(trace, cells, self.traces, now, span_s, gap_s)

    def _prepare(self, first: int, last: int) -> None:
        """Empty the ring columns for buckets ``first`` to ``last + 1`` that held an older one."""
        self._fit(first, last - first + 2)  # the window's buckets and the one after
        wanted = np.arange(first, last + 2)
        cols = wanted % self._bucket.size
        moved = self._bucket[cols] != wanted
        if moved.any():
            self._grid[:, cols[moved]] = _EMPTY
            self._bucket[cols[moved]] = wanted[moved]

    def _merge(self, at: np.ndarray, new: np.ndarray) -> None:
        """Fold fresh cells into the grid's cells ``at`` (an empty cell holds ``_EMPTY``)."""
        flat = self._flat
        old = flat.take(at, axis=0)
        new[:, COUNT] += old[:, COUNT]
        np.minimum(old[:, FIRST], new[:, FIRST], out=new[:, FIRST])
        np.maximum(old[:, LAST], new[:, LAST], out=new[:, LAST])
        # The first minimum (maximum) in time: the older cell's on a tie of values.
        lo = (old[:, VMIN] < new[:, VMIN]) | ((old[:, VMIN] == new[:, VMIN]) & (old[:, TMIN] <= new[:, TMIN]))
        hi = (old[:, VMAX] > new[:, VMAX]) | ((old[:, VMAX] == new[:, VMAX]) & (old[:, TMAX] <= new[:, TMAX]))
        np.copyto(new[:, TMIN:VMIN + 1], old[:, TMIN:VMIN + 1], where=lo[:, None])
        np.copyto(new[:, TMAX:VMAX + 1], old[:, TMAX:VMAX + 1], where=hi[:, None])
        flat[at] = new

    def _fit(self, first: int, buckets: int) -> None:
        """Make the ring hold ``buckets`` columns, keeping the cells from bucket ``first`` on."""
        if self._bucket.size >= buckets:
            return
        grid = np.empty((self.traces, buckets, len(KEPT_FIELDS)))
        grid[:] = _EMPTY
        number = np.full(buckets, np.iinfo(np.int64).min)
        held = np.flatnonzero(self._grid[:, :, COUNT].any(axis=0) & (self._bucket >= first))
        grid[:, self._bucket[held] % buckets] = self._grid[:, held]
        number[self._bucket[held] % buckets] = self._bucket[held]
        self._grid, self._bucket = grid, number
        self._flat = grid.reshape(-1, len(KEPT_FIELDS))

    def window(self, first: int, last: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The non-empty cells of buckets ``first`` to ``last``, by trace then time:
        (trace, bucket number, cells), a cell a row of ``KEPT_FIELDS``."""
        ring = self._bucket.size
        cols = np.arange(first, last + 1) % ring  # each holds its bucket (_prepare)
        trace, k = np.divmod(np.flatnonzero(self._grid[:, cols, COUNT] > 0), len(cols))
        self._held = len(trace)
        return trace, k + first, self._flat.take(trace * ring + cols[k], axis=0)

    def held(self) -> int:
        """Buckets kept between refreshes (bounded by traces × buckets in the window)."""
        return self._held


def points_of_cells(trace: np.ndarray, cells: np.ndarray, traces: int, now: float, span_s: float,
                    gap_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(points per trace, x, values) of cells (by trace then time), x in seconds before ``now``:
    each cell's min and max in time order, a NaN where samples are more than ``gap_s`` apart."""
    if len(cells) == 0:
        return np.zeros(traces, np.int64), np.empty(0), np.empty(0)
    tmin, vmin, tmax, vmax = cells[:, TMIN], cells[:, VMIN], cells[:, TMAX], cells[:, VMAX]
    lo_first = tmin <= tmax
    t = np.column_stack([np.where(lo_first, tmin, tmax), np.where(lo_first, tmax, tmin)]).ravel()
    v = np.column_stack([np.where(lo_first, vmin, vmax), np.where(lo_first, vmax, vmin)]).ravel()
    tr = np.repeat(trace, 2)
    jumps = np.flatnonzero(cells[1:, FIRST] - cells[:-1, LAST] > gap_s)
    jumps = jumps[trace[jumps + 1] == trace[jumps]]  # a gap within a trace, not between two
    if len(jumps):
        at = 2 * (jumps + 1)
        t = np.insert(t, at, cells[jumps, LAST] + gap_s / 2)
        v = np.insert(v, at, np.nan)
        tr = np.insert(tr, at, trace[jumps])
    keep = (t >= now - span_s) & (t <= now)  # rows stamped after ``now`` show next time
    if keep.all():  # (most refreshes: no copies)
        return np.bincount(tr, minlength=traces), t - now, v
    return np.bincount(tr[keep], minlength=traces), t[keep] - now, v[keep]
