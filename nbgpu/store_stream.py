"""One (device, stream)'s rows: chunked numpy columns, folded into buckets when old, read back
as pieces of [t0, t1] or only what was appended since."""

from __future__ import annotations

from collections import deque

import numpy as np

CHUNK_ROWS = 2048
# A stream never keeps more full-resolution rows than this (guards a runaway source).
MAX_FULL_RES_ROWS = 600_000


class _Chunk:
    """A fixed-size block of rows: float64 times and one typed array per column."""

    __slots__ = ("cols", "n", "start", "times")

    def __init__(self, columns: dict[str, np.dtype], rows: int) -> None:
        self.times = np.empty(rows, dtype=np.float64)
        self.cols = {name: np.empty(rows, dtype=dtype) for name, dtype in columns.items()}
        self.n = 0
        self.start = 0


def _joined(pieces: list[tuple[np.ndarray, list[np.ndarray]]], columns: list[str]):
    """One copy of the rows of ``pieces`` (``_views``' output), as (times, {column: values})."""
    if not pieces:
        return np.empty(0), {c: np.empty(0) for c in columns}
    return (np.concatenate([t for t, _ in pieces]),
            {c: np.concatenate([cols[i] for _, cols in pieces]) for i, c in enumerate(columns)})


def _view(ch: _Chunk, lo: int, t0: float, t1: float, columns: list[str], before: float = np.inf):
    """Views of rows ``lo`` on of ``ch`` with t0 <= time <= t1 and time < ``before``; None if none."""
    t = ch.times[lo:ch.n]
    a = int(t.searchsorted(t0, "left")) if t[0] < t0 else 0
    b = int(t.searchsorted(t1, "right")) if t[-1] > t1 else len(t)  # the usual case: no search
    if b > a and t[b - 1] >= before:
        b = int(t.searchsorted(before, "left"))
    return (t[a:b], [ch.cols[c][lo + a:lo + b] for c in columns]) if b > a else None


def _views(chunks: deque[_Chunk], columns: list[str], t0: float, t1: float,
           before: float = np.inf) -> list[tuple[np.ndarray, list[np.ndarray]]]:
    """Views of the live rows with t0 <= time <= t1 (and time < ``before``), oldest first."""
    out = []
    for ch in reversed(chunks):
        if ch.n <= ch.start:
            continue
        if ch.times[ch.n - 1] < t0:
            break
        if (piece := _view(ch, ch.start, t0, t1, columns, before)) is not None:
            out.append(piece)
    out.reverse()
    return out


def _append_rows(chunks: deque[_Chunk], columns: dict[str, np.dtype], times: np.ndarray,
                 values: dict[str, np.ndarray]) -> None:
    """Append time-sorted rows to a deque of chunks, opening chunks as they fill."""
    pos = 0
    while pos < len(times):
        if not chunks or chunks[-1].n == CHUNK_ROWS:
            chunks.append(_Chunk(columns, CHUNK_ROWS))
        ch = chunks[-1]
        take = min(len(times) - pos, CHUNK_ROWS - ch.n)
        ch.times[ch.n : ch.n + take] = times[pos : pos + take]
        for name, arr in ch.cols.items():
            src = values.get(name)
            arr[ch.n : ch.n + take] = np.nan if src is None else src[pos : pos + take]
        ch.n += take
        pos += take


def _cut_before(chunks: deque[_Chunk], t_cut: float | None, max_rows: int | None = None,
                columns: list[str] | None = None):
    """Remove the oldest rows (time < ``t_cut``, or beyond ``max_rows`` live rows); return them."""
    out_t: list[np.ndarray] = []
    out_c: dict[str, list[np.ndarray]] = {c: [] for c in columns or ()}
    excess = 0
    if max_rows is not None:
        excess = sum(ch.n - ch.start for ch in chunks) - max_rows
    while chunks:
        ch = chunks[0]
        t = ch.times[ch.start : ch.n]
        k = int(np.searchsorted(t, t_cut, "left")) if t_cut is not None else 0
        k = max(k, min(excess, len(t)))
        if k == 0:
            break
        out_t.append(t[:k].copy())
        for c in out_c:
            out_c[c].append(ch.cols[c][ch.start : ch.start + k].copy())
        ch.start += k
        excess -= k
        if ch.start >= ch.n and (ch.n == CHUNK_ROWS or len(chunks) > 1):
            chunks.popleft()
        elif k < len(t) or ch.n < CHUNK_ROWS:
            break
    if not out_t:
        return None
    return np.concatenate(out_t), {c: np.concatenate(v) for c, v in out_c.items()}


def oldest_time(chunks: deque[_Chunk]) -> float:
    """Time of the oldest live row of ``chunks`` (inf: none)."""
    return next((float(ch.times[ch.start]) for ch in chunks if ch.n > ch.start), np.inf)


def newest_time(chunks: deque[_Chunk]) -> float:
    """Time of the newest live row of ``chunks`` (-inf: none)."""
    return next((float(ch.times[ch.n - 1]) for ch in reversed(chunks) if ch.n > ch.start), -np.inf)


class Stream:
    """Rows of one (device, stream): full resolution, then buckets of mean/min/max."""

    def __init__(self, columns: dict[str, np.dtype], full_res_s: float, bucket_s: float,
                 history_s: float) -> None:
        self.columns = dict(columns)
        self.full_res_s, self.bucket_s, self.history_s = full_res_s, bucket_s, history_s
        self.chunks: deque[_Chunk] = deque()
        self.coarse_columns = {name + suffix: dtype for name, dtype in self.columns.items()
                               for suffix in ("", "_min", "_max")}
        self.coarse: deque[_Chunk] = deque()
        self.rows = 0
        self.appended = 0  # rows ever appended: a reader's cursor (``pieces_since``)
        self.last_time = -np.inf
        self._good: dict[str, tuple[float, float]] = {}  # column -> newest non-NaN (time, value)

    def append_row(self, t: float, values: dict[str, float]) -> None:
        """Add one row if newer than the newest kept (a late row is dropped, not reordered)."""
        if t <= self.last_time:
            return
        if not self.chunks or self.chunks[-1].n == CHUNK_ROWS:
            self.chunks.append(_Chunk(self.columns, CHUNK_ROWS))
        ch = self.chunks[-1]
        i = ch.n
        ch.times[i] = t
        good = self._good
        for name, arr in ch.cols.items():
            arr[i] = values.get(name, np.nan)
            v = float(arr[i])
            if v == v:  # not NaN: the newest good value, read by newest() without a scan
                good[name] = (float(t), v)
        ch.n = i + 1
        self.rows += 1
        self.appended += 1
        self.last_time = t
        self._fold()

    def append_many(self, times: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Add rows in time order (rows older than the newest kept row are dropped)."""
        if len(times) == 1:  # one row: written value by value, without array calls
            self.append_row(float(times[0]), {k: v[0] for k, v in values.items()})
            return
        keep = times > self.last_time
        if not keep.all():
            times = times[keep]
            values = {k: v[keep] for k, v in values.items()}
        if not len(times):
            return
        _append_rows(self.chunks, self.columns, times, values)
        for name, src in values.items():
            if name in self.columns:
                ok = np.flatnonzero(~np.isnan(np.asarray(src, dtype=np.float64)))
                if len(ok):
                    stored = np.dtype(self.columns[name]).type(src[ok[-1]])  # as the column keeps it
                    self._good[name] = (float(times[ok[-1]]), float(stored))
        self.rows += len(times)
        self.appended += len(times)
        self.last_time = float(times[-1])
        self._fold()

    def _fold(self) -> None:
        """Fold complete buckets past the full-resolution horizon; drop rows past history."""
        horizon = self.last_time - min(self.full_res_s, self.history_s)
        cut = np.floor(horizon / self.bucket_s) * self.bucket_s  # whole buckets only
        if oldest_time(self.chunks) < cut or self.rows > MAX_FULL_RES_ROWS:
            old = _cut_before(self.chunks, cut, MAX_FULL_RES_ROWS, list(self.columns))
            if old is not None:
                self.rows -= len(old[0])
                self._add_buckets(*old)
        oldest_kept = self.last_time - self.history_s
        if oldest_time(self.coarse) < oldest_kept:
            _cut_before(self.coarse, oldest_kept)

    def _add_buckets(self, t: np.ndarray, cols: dict[str, np.ndarray]) -> None:
        bucket = np.floor(t / self.bucket_s)
        starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        out_t = (bucket[starts] + 0.5) * self.bucket_s
        out: dict[str, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for name in self.columns:
                v = cols[name].astype(np.float64)
                finite = np.where(np.isnan(v), 0.0, v)
                counts = np.add.reduceat(~np.isnan(v), starts)
                sums = np.add.reduceat(finite, starts)
                mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
                out[name] = mean
                out[name + "_min"] = np.fmin.reduceat(v, starts)
                out[name + "_max"] = np.fmax.reduceat(v, starts)
        keep = out_t > newest_time(self.coarse)
        if not keep.all():  # a bucket already folded (a MAX_FULL_RES_ROWS cut split it)
            out_t = out_t[keep]
            out = {k: v[keep] for k, v in out.items()}
        _append_rows(self.coarse, self.coarse_columns, out_t, out)

    def read(self, t0: float, t1: float, coarse: bool = True):
        """Rows in [t0, t1]: (times, {col: values}, decimated_mask: the rows from buckets)."""
        times, cols = _joined(self.pieces(t0, t1, coarse, list(self.columns)), list(self.columns))
        return times, cols, times < oldest_time(self.chunks)  # buckets are older than every full row

    def pieces(self, t0: float, t1: float, coarse: bool, columns: list[str]
               ) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        """Views of the rows in [t0, t1], oldest first, copied by none: (with ``coarse``) buckets
        older than every full-resolution row, then the full-resolution rows."""
        oldest = max(t0, self.last_time - self.history_s)
        full = _views(self.chunks, columns, oldest, t1)
        if coarse and self.coarse and (first_full := oldest_time(self.chunks)) > oldest:
            return _views(self.coarse, columns, oldest, t1, before=first_full) + full
        return full

    def pieces_since(self, appended: int, t0: float, t1: float, columns: list[str]
                     ) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        """Views of the full-resolution rows appended after the first ``appended``, in [t0, t1]."""
        left = self.appended - appended
        out: list[tuple[np.ndarray, list[np.ndarray]]] = []
        for ch in reversed(self.chunks):  # a refresh's usual case: the newest chunk alone
            if left <= 0:
                break
            lo = max(ch.start, ch.n - left)
            left -= ch.n - lo
            if lo < ch.n and (piece := _view(ch, lo, t0, t1, columns)) is not None:
                out.insert(0, piece)
        return out

    def nbytes(self) -> int:
        chunks = (*self.chunks, *self.coarse)
        return sum(c.times.nbytes + sum(a.nbytes for a in c.cols.values()) for c in chunks)
