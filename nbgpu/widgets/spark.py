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

from ..decimate import Buckets, bucket_cells

_FIELDS = ("index", "count", "first_t", "last_t", "tmin", "vmin", "tmax", "vmax")
_KEPT = _FIELDS[1:]  # what a grid cell keeps; its bucket number is its place in the grid
COUNT, FIRST, LAST, TMIN, VMIN, TMAX, VMAX = range(len(_KEPT))
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
        self._grid = np.zeros((traces, 0, len(_KEPT)))  # trace × ring column × field
        self._flat = self._grid.reshape(-1, len(_KEPT))  # the grid as one cell a row (a view)
        self._bucket = np.zeros(0, np.int64)  # bucket number each ring column holds
        self._held = 0
        self._prepared: tuple[int, int, int] | None = None  # (first, last, ring) made ready
        self._cols_of: tuple[int, int, int, np.ndarray] | None = None  # the window's columns

    def start(self, now: float, span_s: float) -> float:
        """Epoch seconds where the window starts: the first update's rows begin there."""
        return math.floor((now - span_s) / self.width_s) * self.width_s

    def update(self, reads: list[tuple[np.ndarray, np.ndarray]], now: float, span_s: float
               ) -> tuple[np.ndarray, Buckets]:
        """``update_packed`` of ``reads[i]``, trace ``i``'s new rows (time-sorted)."""
        lengths = np.fromiter((len(t) for t, _ in reads), np.int64, len(reads))
        t = np.concatenate([r[0] for r in reads]) if reads else np.empty(0)
        v = np.concatenate([r[1] for r in reads]) if reads else np.empty(0)
        return self.update_packed(lengths, t, v, now, span_s)

    def update_packed(self, lengths: np.ndarray, t: np.ndarray, v: np.ndarray, now: float,
                      span_s: float) -> tuple[np.ndarray, Buckets]:
        """Add new rows; return (trace of each bucket, buckets) in the window, by trace then time.

        ``lengths[i]`` rows of ``t``/``v`` after those of the traces before are trace ``i``'s
        new rows, time-sorted, no NaN (``Store.series_packed``). Rows before the window
        are dropped.
        """
        trace, index, cells = self.update_cells(lengths, t, v, now, span_s)
        return trace, Buckets(index, cells[:, COUNT].astype(np.int64), *cells[:, FIRST:].T)

    def update_cells(self, lengths: np.ndarray, t: np.ndarray, v: np.ndarray, now: float,
                     span_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``update_packed`` as (trace, bucket number, cells): a row of fields per bucket
        (count, first_t, last_t, tmin, vmin, tmax, vmax), as ``points_of_cells`` reads them."""
        first, last = self.add(lengths, t, v, now, span_s)
        return self._window(first, last)

    def add(self, lengths: np.ndarray, t: np.ndarray, v: np.ndarray, now: float, span_s: float
            ) -> tuple[int, int]:
        """Merge new rows (as ``update_packed`` takes them) into their cells; returns the
        window's first and last bucket numbers (``points`` reads them)."""
        return self.add_rows(np.repeat(np.arange(len(lengths)), lengths), t, v, now, span_s)

    def add_rows(self, trace: np.ndarray, t: np.ndarray, v: np.ndarray, now: float, span_s: float
                 ) -> tuple[int, int]:
        """``add`` of rows given with their trace each (non-decreasing, ``Store.series_rows``)."""
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
        grid = np.empty((self.traces, buckets, len(_KEPT)))
        grid[:] = _EMPTY
        number = np.full(buckets, np.iinfo(np.int64).min)
        held = np.flatnonzero(self._grid[:, :, COUNT].any(axis=0) & (self._bucket >= first))
        grid[:, self._bucket[held] % buckets] = self._grid[:, held]
        number[self._bucket[held] % buckets] = self._bucket[held]
        self._grid, self._bucket = grid, number
        self._flat = grid.reshape(-1, len(_KEPT))

    def _window(self, first: int, last: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The non-empty cells of buckets ``first`` to ``last``, by trace then time:
        (trace, bucket number, cells)."""
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


def points_of_all(trace: np.ndarray, b: Buckets, traces: int, now: float, span_s: float,
                  gap_s: float) -> list[tuple[np.ndarray, np.ndarray]]:
    """Line points of every trace: a list of (x, values), x in seconds before ``now``.

    Per bucket its min and max in time order; a NaN where samples are more than ``gap_s``
    apart, so missing data shows as a gap.
    """
    lengths, x, v = points_packed(trace, b, traces, now, span_s, gap_s)
    ends = np.cumsum(lengths)
    return [(x[e - n:e], v[e - n:e]) for n, e in zip(lengths.tolist(), ends.tolist(), strict=True)]


def points_packed(trace: np.ndarray, b: Buckets, traces: int, now: float, span_s: float,
                  gap_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``points_of_all`` as one flat run: (points per trace, x, values), trace after trace.

    The panel packs every line at once from these, with no list of per-trace arrays between.
    """
    cells = np.column_stack([b.count, b.first_t, b.last_t, b.tmin, b.vmin, b.tmax, b.vmax]) \
        if len(b) else np.empty((0, len(_KEPT)))
    return points_of_cells(trace, cells, traces, now, span_s, gap_s)


def points_of_cells(trace: np.ndarray, cells: np.ndarray, traces: int, now: float, span_s: float,
                    gap_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``points_packed`` of the cells ``SparkSet.update_cells`` returns (a row each)."""
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
