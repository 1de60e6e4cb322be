"""Incremental min/max buckets of many sparklines, kept between panel refreshes.

Buckets sit on a fixed grid of absolute time (``width_s`` each, about 2 pixels). Each
refresh hands over only the rows the store gained since the last one (its cursor), late
rows of a drained NVML sample buffer included, and they are merged into their buckets
with vectorised numpy. The cost of a refresh follows the new rows, not the window's
length or the sample rate, and no row is missed however late it arrives.
"""

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
    """The buckets of many sparklines at once: one vectorised reduction per refresh.

    Args:
        traces: how many sparklines.
        width_s: seconds per bucket (the span over the number of buckets).

    The traces share one bucket grid, kept as one array (trace × bucket × field, a ring
    over the window's buckets): a refresh reduces the new rows of every trace together,
    merges them into their cells and reads the window out in order, with a fixed number
    of numpy calls whatever the number of traces or buckets. Rows are given once each:
    those of the window at the first update, then only new ones. ``ahead`` turns True
    when rows more than a bucket newer than ``now`` came (a clock behind the data): they
    were not kept, so the caller starts a new set.
    """

    def __init__(self, traces: int, width_s: float) -> None:
        self.traces = traces
        self.width_s = float(width_s)
        self.ahead = False
        self._grid = np.zeros((traces, 0, len(KEPT_FIELDS)))  # trace × ring column × field
        self._flat = self._grid.reshape(-1, len(KEPT_FIELDS))  # the grid as one cell a row (a view)
        self._bucket = np.zeros(0, np.int64)  # bucket number each ring column holds
        self._held = 0
        self._prepared: tuple[int, int, int] | None = None  # (first, last, ring) made ready
        self._cols_of: tuple[int, int, int, np.ndarray] | None = None  # the window's columns

    def start(self, now: float, span_s: float) -> float:
        """Epoch seconds where the window starts: the first update's rows begin there."""
        return math.floor((now - span_s) / self.width_s) * self.width_s

    def add_rows(self, trace: np.ndarray, t: np.ndarray, v: np.ndarray, now: float, span_s: float
                 ) -> tuple[int, int]:
        """Merge new rows into their cells, each row with its trace (non-decreasing, as
        ``Store.series_rows`` gives them; time-sorted within a trace, no NaN); rows before
        the window are dropped. Returns the window's first and last bucket numbers, which
        ``points`` and ``window`` read."""
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
            # Each row's cell in the grid (trace × ring): one run per bucket of a trace.
            self._merge(*bucket_cells(t, np.asarray(v, np.float64), trace * ring + bucket % ring))
        return first, last

    def points(self, first: int, last: int, now: float, span_s: float, gap_s: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``points_of_cells`` of the window's cells (buckets ``first`` to ``last``)."""
        trace, _, cells = self._cells(first, last)
        return points_of_cells(trace, cells, self.traces, now, span_s, gap_s)

    def _prepare(self, first: int, last: int) -> None:
        """Ring columns for buckets ``first`` to ``last + 1``: one that held an older bucket is
        emptied. Nothing to do for the window made ready last time (the same ring), and only
        the buckets gained for a window that moved on (no column was given out since)."""
        self._fit(first, last - first + 2)  # the window's buckets and the one after
        ring = self._bucket.size
        done = self._prepared
        if done == (first, last, ring):
            return
        lowest = first
        if done is not None and done[2] == ring and first >= done[0] and last >= done[1]:
            lowest = max(done[1] + 2, first)
        wanted = np.arange(lowest, last + 2)
        cols = wanted % ring
        moved = self._bucket[cols] != wanted  # a column that held an older bucket: now empty
        if moved.any():
            self._grid[:, cols[moved]] = _EMPTY
            self._bucket[cols[moved]] = wanted[moved]
        self._prepared = (first, last, ring)

    def _merge(self, at: np.ndarray, new: np.ndarray) -> None:
        """Fold fresh cells into the grid's cells ``at`` (an empty cell holds ``_EMPTY``)."""
        flat = self._flat
        old = flat.take(at, axis=0)
        new[:, COUNT] += old[:, COUNT]
        np.minimum(old[:, FIRST], new[:, FIRST], out=new[:, FIRST])
        np.maximum(old[:, LAST], new[:, LAST], out=new[:, LAST])
        # The first minimum (maximum) in time: the older cell's on a tie of values.
        lo = old[:, VMIN] < new[:, VMIN]
        tie = old[:, VMIN] == new[:, VMIN]
        if tie.any():
            lo |= tie & (old[:, TMIN] <= new[:, TMIN])
        hi = old[:, VMAX] > new[:, VMAX]
        tie = old[:, VMAX] == new[:, VMAX]
        if tie.any():
            hi |= tie & (old[:, TMAX] <= new[:, TMAX])
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
        trace, k, cells = self._cells(first, last)
        return trace, k + first, cells

    def _cells(self, first: int, last: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The window's non-empty cells, by trace then time: (trace, place in the window, cells)."""
        ring = self._bucket.size
        cols = self._columns(first, last)  # each holds its bucket (_prepare)
        trace, k = np.divmod(np.flatnonzero(self._grid[:, cols, COUNT] > 0), len(cols))
        cells = self._flat.take(trace * ring + cols[k], axis=0)
        self._held = len(trace)
        return trace, k, cells

    def _columns(self, first: int, last: int) -> np.ndarray:
        """Ring columns of buckets ``first`` to ``last`` (kept while the window stays)."""
        ring = self._bucket.size
        got = self._cols_of
        if got is None or got[:3] != (first, last, ring):
            got = self._cols_of = (first, last, ring, np.arange(first, last + 1) % ring)
        return got[3]

    def held(self) -> int:
        """Buckets kept between refreshes (bounded by traces × buckets in the window)."""
        return self._held


def points_of_cells(trace: np.ndarray, cells: np.ndarray, traces: int, now: float, span_s: float,
                    gap_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Line points of every trace from cells (a row of ``KEPT_FIELDS`` each, by trace then time):
    (points per trace, x, values) as one flat run, trace after trace, x in seconds before
    ``now``. Per bucket its min and max in time order; a NaN where samples are more than
    ``gap_s`` apart, so missing data shows as a gap."""
    if len(cells) == 0:
        return np.zeros(traces, np.int64), np.empty(0), np.empty(0)
    tmin, vmin, tmax, vmax = cells[:, TMIN], cells[:, VMIN], cells[:, TMAX], cells[:, VMAX]
    lo_first = tmin <= tmax  # per cell its min and max point, the earlier first
    t, v = np.empty((len(cells), 2)), np.empty((len(cells), 2))
    t[:, 0], t[:, 1] = np.where(lo_first, tmin, tmax), np.where(lo_first, tmax, tmin)
    v[:, 0], v[:, 1] = np.where(lo_first, vmin, vmax), np.where(lo_first, vmax, vmin)
    t, v = t.ravel(), v.ravel()
    tr = np.repeat(trace, 2)
    jumps = np.flatnonzero(cells[1:, FIRST] - cells[:-1, LAST] > gap_s)
    if len(jumps):  # a gap within a trace (not the step from one trace to the next)
        jumps = jumps[trace[jumps + 1] == trace[jumps]]
    if len(jumps):
        at = 2 * (jumps + 1)
        t = np.insert(t, at, cells[jumps, LAST] + gap_s / 2)
        v = np.insert(v, at, np.nan)
        tr = np.insert(tr, at, trace[jumps])
    keep = (t >= now - span_s) & (t <= now)  # rows stamped after ``now`` show next time
    if keep.all():
        return np.bincount(tr, minlength=traces), t - now, v
    return np.bincount(tr[keep], minlength=traces), t[keep] - now, v[keep]
