"""Bounded, thread-safe storage of readings: chunked numpy columns per (device, stream).

The sampler thread is the only writer. Readers (timeline, views, captures) take copies
under a short lock. Rows older than ``full_res_s`` are folded into ``bucket_s`` buckets
(mean, min, max of each column); buckets older than ``history_s`` are dropped, so memory
is bounded by the sources' rates times those durations, whatever runs how long.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

CHUNK_ROWS = 2048

# Defaults: one hour at full resolution, then 10 s buckets for 24 hours.
DEFAULT_FULL_RES_S = 3600.0
DEFAULT_BUCKET_S = 10.0
DEFAULT_HISTORY_S = 24 * 3600.0
# A stream never keeps more full-resolution rows than this (guards a runaway source).
MAX_FULL_RES_ROWS = 600_000


class _Chunk:
    """A fixed-size block of rows: float64 times and one typed array per column."""

    __slots__ = ("cols", "n", "times")

    def __init__(self, columns: dict[str, np.dtype], rows: int) -> None:
        self.times = np.empty(rows, dtype=np.float64)
        self.cols = {name: np.empty(rows, dtype=dtype) for name, dtype in columns.items()}
        self.n = 0

    def nbytes(self) -> int:
        return self.times.nbytes + sum(a.nbytes for a in self.cols.values())


def _concat(chunks: list[_Chunk], columns: list[str], t0: float, t1: float):
    """Rows of ``chunks`` with t0 <= time <= t1, as (times, {column: values})."""
    times, cols = [], {c: [] for c in columns}
    for ch in chunks:
        if ch.n == 0:
            continue
        t = ch.times[: ch.n]
        if t[-1] < t0 or t[0] > t1:
            continue
        lo, hi = np.searchsorted(t, t0, "left"), np.searchsorted(t, t1, "right")
        times.append(t[lo:hi])
        for c in columns:
            cols[c].append(ch.cols[c][lo:hi])
    if not times:
        return np.empty(0), {c: np.empty(0) for c in columns}
    return np.concatenate(times), {c: np.concatenate(v) for c, v in cols.items()}


class Stream:
    """Rows of one (device, stream): full resolution, then buckets of mean/min/max."""

    def __init__(self, columns: dict[str, np.dtype], full_res_s: float, bucket_s: float,
                 history_s: float) -> None:
        self.columns = dict(columns)
        self.full_res_s, self.bucket_s, self.history_s = full_res_s, bucket_s, history_s
        self.chunks: deque[_Chunk] = deque()
        coarse_cols: dict[str, np.dtype] = {}
        for name, dtype in self.columns.items():
            for suffix in ("", "_min", "_max"):
                coarse_cols[name + suffix] = dtype
        self.coarse_columns = coarse_cols
        self.coarse: deque[_Chunk] = deque()
        self.rows = 0
        self.last_time = -np.inf

    def append(self, t: float, values: dict[str, float]) -> None:
        """Add one row; columns missing from ``values`` are NaN."""
        if t < self.last_time:  # keep time sorted; a late row is dropped, not reordered
            return
        ch = self._tail()
        i = ch.n
        ch.times[i] = t
        for name, arr in ch.cols.items():
            arr[i] = values.get(name, np.nan)
        ch.n = i + 1
        self.rows += 1
        self.last_time = t

    def append_many(self, times: np.ndarray, values: dict[str, np.ndarray]) -> None:
        """Add rows in time order (rows older than the newest kept row are dropped)."""
        keep = times > self.last_time
        if not keep.all():
            times = times[keep]
            values = {k: v[keep] for k, v in values.items()}
        pos = 0
        while pos < len(times):
            ch = self._tail()
            take = min(len(times) - pos, CHUNK_ROWS - ch.n)
            ch.times[ch.n : ch.n + take] = times[pos : pos + take]
            for name, arr in ch.cols.items():
                src = values.get(name)
                arr[ch.n : ch.n + take] = np.nan if src is None else src[pos : pos + take]
            ch.n += take
            pos += take
            self.rows += take
            self.last_time = float(times[pos - 1])

    def _tail(self) -> _Chunk:
        if not self.chunks or self.chunks[-1].n == CHUNK_ROWS:
            self._fold()
            self.chunks.append(_Chunk(self.columns, CHUNK_ROWS))
        return self.chunks[-1]

    def _fold(self) -> None:
        """Move full chunks past the full-resolution horizon into buckets; drop old buckets."""
        horizon = self.last_time - self.full_res_s
        max_chunks = max(1, MAX_FULL_RES_ROWS // CHUNK_ROWS)
        while len(self.chunks) > 1 and (
            self.chunks[0].times[self.chunks[0].n - 1] < horizon or len(self.chunks) > max_chunks
        ):
            old = self.chunks.popleft()
            self.rows -= old.n
            self._add_buckets(old)
        oldest_kept = self.last_time - self.history_s
        while self.coarse and self.coarse[0].n and self.coarse[0].times[self.coarse[0].n - 1] < oldest_kept:
            self.coarse.popleft()

    def _add_buckets(self, ch: _Chunk) -> None:
        t = ch.times[: ch.n]
        bucket = np.floor(t / self.bucket_s)
        starts = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        out_t = (bucket[starts] + 0.5) * self.bucket_s
        out: dict[str, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for name in self.columns:
                v = ch.cols[name][: ch.n].astype(np.float64)
                finite = np.where(np.isnan(v), 0.0, v)
                counts = np.add.reduceat(~np.isnan(v), starts)
                sums = np.add.reduceat(finite, starts)
                mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
                vmin = np.fmin.reduceat(v, starts)
                vmax = np.fmax.reduceat(v, starts)
                out[name], out[name + "_min"], out[name + "_max"] = mean, vmin, vmax
        # A bucket split across two chunks appears twice; readers see both halves.
        for i in range(len(out_t)):
            if not self.coarse or self.coarse[-1].n == CHUNK_ROWS:
                self.coarse.append(_Chunk(self.coarse_columns, CHUNK_ROWS))
            c = self.coarse[-1]
            c.times[c.n] = out_t[i]
            for name, arr in c.cols.items():
                arr[c.n] = out[name][i]
            c.n += 1

    def read(self, t0: float, t1: float, coarse: bool = True, columns: list[str] | None = None):
        """Rows in [t0, t1]: (times, {col: values}, decimated_mask); all columns or ``columns``."""
        names = list(self.columns) if columns is None else columns
        times, cols = _concat(list(self.chunks), names, t0, t1)
        decimated = np.zeros(len(times), dtype=bool)
        if coarse and self.coarse:
            first_full = self.chunks[0].times[0] if self.chunks and self.chunks[0].n else np.inf
            oldest = max(t0, self.last_time - self.history_s)
            ct, cc = _concat(list(self.coarse), names, oldest, min(t1, first_full))
            ct_keep = ct < first_full
            if ct_keep.any():
                times = np.concatenate([ct[ct_keep], times])
                cols = {k: np.concatenate([cc[k][ct_keep], v]) for k, v in cols.items()}
                decimated = np.concatenate([np.ones(ct_keep.sum(), dtype=bool), decimated])
        return times, cols, decimated

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.chunks) + sum(c.nbytes() for c in self.coarse)


@dataclass
class Event:
    """Something that happened at a time: a mark, a lost GPU, a sampler state change."""

    time: float
    kind: str
    label: str
    device: object = None
    extra: dict = field(default_factory=dict)


class Store:
    """All readings of one sampler, keyed by (device key, stream name)."""

    def __init__(self, full_res_s: float = DEFAULT_FULL_RES_S, bucket_s: float = DEFAULT_BUCKET_S,
                 history_s: float = DEFAULT_HISTORY_S, max_events: int = 10_000) -> None:
        self.full_res_s, self.bucket_s, self.history_s = full_res_s, bucket_s, history_s
        self.lock = threading.Lock()
        self._streams: dict[tuple[object, str], Stream] = {}
        self._where: dict[tuple[object, str], list[str]] = {}  # (device, metric) -> streams
        self.events: deque[Event] = deque(maxlen=max_events)
        self.generation = 0  # bumped on every write; lets views skip redraws

    def declare(self, device: object, stream: str, columns: dict[str, np.dtype]) -> None:
        """Create a stream; each metric lives in exactly one stream of a device."""
        with self.lock:
            self._streams[(device, stream)] = Stream(columns, self.full_res_s, self.bucket_s,
                                                     self.history_s)
            for name in columns:
                streams = self._where.setdefault((device, name), [])
                if stream not in streams:
                    streams.append(stream)

    def append(self, device: object, stream: str, t: float, values: dict[str, float]) -> None:
        with self.lock:
            self._streams[(device, stream)].append(t, values)
            self.generation += 1

    def append_many(self, device: object, stream: str, times: np.ndarray,
                    values: dict[str, np.ndarray]) -> None:
        if len(times) == 0:
            return
        with self.lock:
            self._streams[(device, stream)].append_many(times, values)
            self.generation += 1

    def add_event(self, event: Event) -> None:
        with self.lock:
            self.events.append(event)
            self.generation += 1

    def devices(self) -> list[object]:
        with self.lock:
            seen: dict[object, None] = {}
            for device, _ in self._streams:
                seen[device] = None
            return list(seen)

    def streams_of(self, device: object) -> list[str]:
        with self.lock:
            return [s for (d, s) in self._streams if d == device]

    def metrics_of(self, device: object) -> list[str]:
        with self.lock:
            return [m for (d, m) in self._where if d == device]

    def read_stream(self, device: object, stream: str, t0: float = -np.inf, t1: float = np.inf,
                    coarse: bool = True):
        """Copy of a stream's rows in [t0, t1]: (times, {col: values}, decimated_mask)."""
        with self.lock:
            return self._streams[(device, stream)].read(t0, t1, coarse)

    def series(self, device: object, metric: str, t0: float = -np.inf, t1: float = np.inf,
               coarse: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of one metric of one device in [t0, t1], NaN rows dropped."""
        parts_t, parts_v = [], []
        with self.lock:
            for stream in self._where.get((device, metric), ()):
                t, cols, _ = self._streams[(device, stream)].read(t0, t1, coarse, [metric])
                v = cols[metric].astype(np.float64)
                ok = ~np.isnan(v)
                parts_t.append(t[ok])
                parts_v.append(v[ok])
        return merge_series(parts_t, parts_v)

    def last(self, device: object, metric: str) -> tuple[float, float]:
        """Newest (time, value) of a metric that is not NaN; (nan, nan) if none."""
        best = (np.nan, np.nan)
        with self.lock:
            for stream in self._where.get((device, metric), ()):
                for ch in reversed(self._streams[(device, stream)].chunks):
                    col = ch.cols[metric][: ch.n]
                    ok = np.flatnonzero(~np.isnan(col))
                    if len(ok):
                        i = ok[-1]
                        if np.isnan(best[0]) or ch.times[i] > best[0]:
                            best = (float(ch.times[i]), float(col[i]))
                        break
        return best

    def nbytes(self) -> int:
        """Bytes held by all streams' arrays."""
        with self.lock:
            return sum(s.nbytes() for s in self._streams.values())


def merge_series(parts_t: list[np.ndarray], parts_v: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One time-sorted (times, values) from parts of a metric kept in several streams."""
    if not parts_t:
        return np.empty(0), np.empty(0)
    if len(parts_t) == 1:
        return parts_t[0], parts_v[0]
    t, v = np.concatenate(parts_t), np.concatenate(parts_v)
    order = np.argsort(t, kind="stable")
    return t[order], v[order]

