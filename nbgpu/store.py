"""Bounded, thread-safe storage of readings: chunked numpy columns per (device, stream).

The sampler thread is the only writer. Readers (timeline, views, captures) take copies
under a short lock. Rows older than ``full_res_s`` are folded into ``bucket_s`` buckets
(mean, min, max of each column) a whole bucket at a time; rows and buckets older than
``history_s`` are dropped and never returned. Memory is bounded by the sources' rates
times those durations, whatever runs how long. Events carry a ``seq`` number so readers
(the recorder) follow them with ``events_since(seq)``.
"""

from __future__ import annotations

import bisect
import math
import numbers
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from .errors import BadArgumentError

CHUNK_ROWS = 2048

# Defaults: one hour at full resolution, then 10 s buckets for 24 hours.
DEFAULT_FULL_RES_S = 3600.0
DEFAULT_BUCKET_S = 10.0
DEFAULT_HISTORY_S = 24 * 3600.0
# A stream never keeps more full-resolution rows than this (guards a runaway source).
MAX_FULL_RES_ROWS = 600_000
MAX_PLANS = 32  # read plans of series_packed kept (a panel uses one)
_NO_VALUE = (math.nan, math.nan)  # (time, value) of a metric with no good row kept


class _Chunk:
    """A fixed-size block of rows: float64 times and one typed array per column.

    Rows ``start`` to ``n`` are live; rows before ``start`` were folded or dropped.
    """

    __slots__ = ("cols", "n", "start", "times")

    def __init__(self, columns: dict[str, np.dtype], rows: int) -> None:
        self.times = np.empty(rows, dtype=np.float64)
        self.cols = {name: np.empty(rows, dtype=dtype) for name, dtype in columns.items()}
        self.n = 0
        self.start = 0

    def nbytes(self) -> int:
        return self.times.nbytes + sum(a.nbytes for a in self.cols.values())


def _joined(pieces: list[tuple[np.ndarray, list[np.ndarray]]], columns: list[str]):
    """One copy of the rows of ``pieces`` (``_views``' output), as (times, {column: values})."""
    if not pieces:
        return np.empty(0), {c: np.empty(0) for c in columns}
    return (np.concatenate([t for t, _ in pieces]),
            {c: np.concatenate([cols[i] for _, cols in pieces]) for i, c in enumerate(columns)})


def _views(chunks: deque[_Chunk], columns: list[str], t0: float, t1: float,
           before: float = np.inf) -> list[tuple[np.ndarray, list[np.ndarray]]]:
    """Views of the live rows with t0 <= time <= t1 (and time < ``before``), oldest first.

    Walks the chunks from the newest and stops at the first one that ends before ``t0``,
    so a read of the last seconds costs the same however long the stream is. Rows once
    written never change, so the views stay valid after the lock is released.
    """
    out = []
    for ch in reversed(chunks):
        if ch.n <= ch.start:
            continue
        t = ch.times[ch.start : ch.n]
        if t[-1] < t0:
            break
        if t[0] > t1 or t[0] >= before:
            continue
        lo = int(t.searchsorted(t0, "left")) if t[0] < t0 else 0
        hi = int(t.searchsorted(t1, "right")) if t[-1] > t1 else len(t)
        if hi > lo and t[hi - 1] >= before:
            hi = int(t.searchsorted(before, "left"))
        if hi > lo:
            out.append((t[lo:hi], [ch.cols[c][ch.start + lo : ch.start + hi] for c in columns]))
    out.reverse()
    return out


def _newest_rows(ch: _Chunk, lo: int, t0: float, t1: float, columns: list[str]
                 ) -> list[tuple[np.ndarray, list[np.ndarray]]]:
    """Views of rows ``lo`` on of chunk ``ch`` with t0 <= time <= t1 (``pieces_since``'s piece)."""
    n = ch.n
    t = ch.times[lo:n]
    first, last = t[0], t[-1]
    if last < t0 or first > t1:
        return []
    cols = ch.cols
    if first >= t0 and last <= t1:  # the usual case: every new row is in the window
        return [(t, [cols[c][lo:n] for c in columns])]
    a = int(t.searchsorted(t0, "left")) if first < t0 else 0
    b = int(t.searchsorted(t1, "right")) if last > t1 else n - lo
    return [(t[a:b], [cols[c][lo + a:lo + b] for c in columns])]


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


class Stream:
    """Rows of one (device, stream): full resolution, then buckets of mean/min/max.

    Bounds hold per row: a row older than ``full_res_s`` is folded into its ``bucket_s``
    bucket once that bucket is complete (so full-resolution rows reach back at most
    ``full_res_s + bucket_s``), and nothing older than ``history_s`` is kept or returned.
    """

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
        self.appended = 0  # rows ever appended: a reader's cursor (``pieces_since``)
        self.last_time = -np.inf
        self._good: dict[str, tuple[float, float]] = {}  # column -> newest non-NaN (time, value)

    def append(self, t: float, values: dict[str, float]) -> None:
        """Add one row; columns missing from ``values`` are NaN."""
        if t < self.last_time:  # keep time sorted; a late row is dropped, not reordered
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

    def append_row(self, t: float, values: dict[str, float]) -> None:
        """Add one row if newer than the newest kept, as ``append_many`` keeps rows."""
        if t > self.last_time:
            self.append(t, values)

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

    def _oldest(self, chunks: deque[_Chunk]) -> float:
        for ch in chunks:
            if ch.n > ch.start:
                return float(ch.times[ch.start])
        return np.inf

    def _fold(self) -> None:
        """Fold complete buckets past the full-resolution horizon; drop rows past history."""
        horizon = self.last_time - min(self.full_res_s, self.history_s)
        cut = np.floor(horizon / self.bucket_s) * self.bucket_s  # whole buckets only
        if self._oldest(self.chunks) < cut or self.rows > MAX_FULL_RES_ROWS:
            old = _cut_before(self.chunks, cut, MAX_FULL_RES_ROWS, list(self.columns))
            if old is not None:
                self.rows -= len(old[0])
                self._add_buckets(*old)
        oldest_kept = self.last_time - self.history_s
        if self._oldest(self.coarse) < oldest_kept:
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
        keep = out_t > self._newest_coarse()
        if not keep.all():  # a bucket already folded (a MAX_FULL_RES_ROWS cut split it)
            out_t = out_t[keep]
            out = {k: v[keep] for k, v in out.items()}
        _append_rows(self.coarse, self.coarse_columns, out_t, out)

    def _newest_coarse(self) -> float:
        for ch in reversed(self.coarse):
            if ch.n > ch.start:
                return float(ch.times[ch.n - 1])
        return -np.inf

    def read(self, t0: float, t1: float, coarse: bool = True, columns: list[str] | None = None):
        """Rows in [t0, t1]: (times, {col: values}, decimated_mask); all columns or ``columns``.

        A copy of ``pieces``: the chunks are walked from the newest, so a read of the last
        seconds costs the same after a minute or an hour of rows.
        """
        names = list(self.columns) if columns is None else columns
        full, old = self._pieces(t0, t1, coarse, names)
        times, cols = _joined(old + full, names)
        decimated = np.zeros(len(times), dtype=bool)
        if old:
            decimated[:sum(len(t) for t, _ in old)] = True
        return times, cols, decimated

    def may_hold(self, column: str, t0: float) -> bool:
        """Whether a row at or after ``t0`` can hold a value (not NaN) of ``column``.

        False when the column's newest value is older than ``t0`` by more than a bucket (the
        row it folds into is stamped within its bucket), or when it never had one: a tick
        stream's power column beside a power sample buffer, say.
        """
        good = self._good.get(column)
        return good is not None and good[0] + self.bucket_s >= t0

    def newest(self, metric: str) -> tuple[float, float]:
        """Newest full-resolution (time, value) of ``metric`` that is not NaN; NaNs if none.

        Kept on append, so no scan: once its row is folded or dropped, later rows of the
        metric are all NaN and so is the answer.
        """
        good = self._good.get(metric)
        if good is None or good[0] < self._oldest(self.chunks):
            return np.nan, np.nan
        return float(good[0]), float(good[1])

    def pieces(self, t0: float, t1: float, coarse: bool, columns: list[str]
               ) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        """The rows ``read`` returns, as views of their chunks (oldest first), copied by none."""
        full, old = self._pieces(t0, t1, coarse, columns)
        return old + full if old else full

    def _pieces(self, t0: float, t1: float, coarse: bool, columns: list[str]):
        """(full-resolution views, coarse views older than every full-resolution row) in [t0, t1]."""
        oldest = max(t0, self.last_time - self.history_s)
        full = _views(self.chunks, columns, oldest, t1)
        old: list[tuple[np.ndarray, list[np.ndarray]]] = []
        if coarse and self.coarse:
            first_full = self._oldest(self.chunks)
            if first_full > oldest:
                old = _views(self.coarse, columns, oldest, t1, before=first_full)
        return full, old

    def pieces_since(self, appended: int, t0: float, t1: float, columns: list[str]
                     ) -> list[tuple[np.ndarray, list[np.ndarray]]]:
        """Views of the full-resolution rows appended after the first ``appended``, in [t0, t1].

        Rows arrive in time order per stream, so these are the newest rows, whatever their
        times: a buffer drained late gives rows older than another stream's newest.
        """
        left = self.appended - appended
        if left <= 0:
            return []
        newest = self.chunks[-1] if self.chunks else None
        if newest is not None and newest.n - left >= newest.start:  # a refresh's usual case
            return _newest_rows(newest, newest.n - left, t0, t1, columns)
        out = []
        for ch in reversed(self.chunks):
            if left <= 0:
                break
            lo = max(ch.start, ch.n - left)
            left -= ch.n - lo
            t = ch.times[lo : ch.n]
            if not len(t) or t[-1] < t0 or t[0] > t1:
                continue
            a = int(t.searchsorted(t0, "left")) if t[0] < t0 else 0
            b = int(t.searchsorted(t1, "right")) if t[-1] > t1 else len(t)
            out.append((t[a:b], [ch.cols[c][lo + a : lo + b] for c in columns]))
        out.reverse()
        return out

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.chunks) + sum(c.nbytes() for c in self.coarse)


class Rows(NamedTuple):
    """Rows of many series one after another, each with its pair (``Store.series_rows``)."""

    pairs: np.ndarray  # index in the pairs asked of each row's pair, non-decreasing
    times: np.ndarray  # epoch seconds, float64
    values: np.ndarray  # float64, no NaN
    cursor: dict  # (device, stream) -> rows appended so far: ``since`` of the next read


class Packed(NamedTuple):
    """Rows of many series one after another (``Store.series_packed``)."""

    lengths: np.ndarray  # rows of each pair, in the order asked
    times: np.ndarray  # epoch seconds, float64
    values: np.ndarray  # float64, no NaN
    cursor: dict  # (device, stream) -> rows appended so far: ``since`` of the next read


@dataclass
class Event:
    """Something that happened at a time: a mark, a lost GPU, a sampler state change."""

    time: float
    kind: str
    label: str
    device: object = None
    extra: dict = field(default_factory=dict)
    seq: int = 0  # set by the store: increases by one per event, never reused


class MarkFollower:
    """A reader's copy of the store's marks, each event read once (``nbgpu.track()`` marks
    every iteration and the store keeps 10,000 events), less those the store let go.

    ``marks`` holds (time, label, seq) in the store's order; a reader may drop some of them
    (it keeps the order).
    """

    def __init__(self) -> None:
        self.marks: list[tuple[float, str, int]] = []
        self._seq = 0  # the newest event read

    def update(self, store: Store) -> list[tuple[float, str, int]]:
        """``marks`` with the store's new marks added and its let-go ones dropped."""
        new = store.events_since(self._seq)
        if new:
            self._seq = new[-1].seq
            self.marks.extend((e.time, e.label, e.seq) for e in new if e.kind == "mark")
        if self.marks and self.marks[0][2] < (kept_from := store.oldest_event_seq()):
            del self.marks[:bisect.bisect_left(self.marks, kept_from, key=lambda m: m[2])]
        return self.marks


def _check_seconds(value: object, name: str, zero_ok: bool = False) -> float:
    """A store bound as float seconds, or BadArgumentError saying what is allowed."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    seconds = float(value) if ok else math.nan
    if not (math.isfinite(seconds) and (seconds > 0 or (zero_ok and seconds == 0))):
        allowed = ">= 0" if zero_ok else "> 0"
        raise BadArgumentError(f"{name} must be a finite number of seconds {allowed}, got {value!r}")
    return seconds


class Store:
    """All readings of one sampler, keyed by (device key, stream name)."""

    def __init__(self, full_res_s: float = DEFAULT_FULL_RES_S, bucket_s: float = DEFAULT_BUCKET_S,
                 history_s: float = DEFAULT_HISTORY_S, max_events: int = 10_000) -> None:
        self.full_res_s = _check_seconds(full_res_s, "full_res_s", zero_ok=True)
        self.bucket_s = _check_seconds(bucket_s, "bucket_s")
        self.history_s = _check_seconds(history_s, "history_s", zero_ok=True)
        self._event_seq = 0
        self.lock = threading.Lock()
        self._streams: dict[tuple[object, str], Stream] = {}
        self._where: dict[tuple[object, str], list[str]] = {}  # (device, metric) -> streams
        self._by_device: dict[object, dict[str, list[str]]] = {}  # device -> {metric: streams}
        self._device_streams: dict[object, list[Stream]] = {}  # in the order first declared
        self._plans: dict[tuple, tuple] = {}  # pairs -> what series_packed reads (see _plan)
        self.events: deque[Event] = deque(maxlen=max_events)
        self.generation = 0  # bumped on every write; lets views skip redraws

    def declare(self, device: object, stream: str, columns: dict[str, np.dtype]) -> None:
        """Create a stream; each metric lives in exactly one stream of a device."""
        with self.lock:
            self._streams[(device, stream)] = Stream(columns, self.full_res_s, self.bucket_s,
                                                     self.history_s)
            self._device_streams[device] = [st for (d, _), st in self._streams.items() if d == device]
            self._plans.clear()
            for name in columns:
                streams = self._where.setdefault((device, name), [])
                self._by_device.setdefault(device, {})[name] = streams
                if stream not in streams:
                    streams.append(stream)

    def append(self, device: object, stream: str, t: float, values: dict[str, float]) -> None:
        with self.lock:
            self._streams[(device, stream)].append(t, values)
            self.generation += 1

    def append_row(self, device: object, stream: str, t: float, values: dict[str, float]) -> None:
        """One row of floats, kept only if newer than the stream's newest (as ``append_many``
        keeps rows): a tick's reads, written with no array made."""
        with self.lock:
            self._streams[(device, stream)].append_row(t, values)
            self.generation += 1

    def append_many(self, device: object, stream: str, times: np.ndarray,
                    values: dict[str, np.ndarray]) -> None:
        if len(times) == 0:
            return
        with self.lock:
            self._streams[(device, stream)].append_many(times, values)
            self.generation += 1

    def add_event(self, event: Event) -> None:
        """Keep ``event`` (the oldest leave past ``max_events``); it gets the next ``seq``."""
        with self.lock:
            self._event_seq += 1
            event.seq = self._event_seq
            self.events.append(event)
            self.generation += 1

    def events_since(self, seq: int = 0) -> list[Event]:
        """Events whose ``seq`` is above ``seq``, oldest first: a reader's cursor never repeats."""
        with self.lock:
            out = []
            for ev in reversed(self.events):
                if ev.seq <= seq:
                    break
                out.append(ev)
        out.reverse()
        return out

    def oldest_event_seq(self) -> int:
        """The ``seq`` of the oldest event kept: a follower drops what it holds from before."""
        with self.lock:
            return self.events[0].seq if self.events else self._event_seq + 1

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
            for name in self._where.get((device, metric), ()):
                stream = self._streams[(device, name)]
                if not stream.may_hold(metric, t0):
                    continue
                pieces = stream.pieces(t0, t1, coarse, [metric])
                if not pieces:
                    continue
                t, cols = _joined(pieces, [metric])
                v = cols[metric].astype(np.float64, copy=False)
                nan = np.isnan(v)
                if nan.any():
                    t, v = t[~nan], v[~nan]
                if len(t):  # a stream that keeps the column but wrote none of it: nothing to merge
                    parts_t.append(t)
                    parts_v.append(v)
        return merge_series(parts_t, parts_v)

    def last(self, device: object, metric: str) -> tuple[float, float]:
        """Newest (time, value) of a metric that is not NaN; (nan, nan) if none."""
        best = (np.nan, np.nan)
        with self.lock:
            for stream in self._where.get((device, metric), ()):
                t, v = self._streams[(device, stream)].newest(metric)
                if not np.isnan(t) and (np.isnan(best[0]) or t > best[0]):
                    best = (t, v)
        return best

    def last_many(self, device: object) -> dict[str, tuple[float, float]]:
        """Newest non-NaN (time, value) of every metric of ``device``, in one locked pass.

        Each stream keeps its newest good row per column on append, so this copies those
        records (the newer where a metric is in several streams; the first declared on a
        tie) instead of searching any rows: the live panel calls it every refresh.
        """
        with self.lock:
            metrics = self._by_device.get(device)
            if not metrics:
                return {}
            out = dict.fromkeys(metrics, _NO_VALUE)
            for stream in self._device_streams[device]:
                kept_from = stream._oldest(stream.chunks)  # an older record was folded away
                for name, good in stream._good.items():
                    if good[0] >= kept_from and not out[name][0] >= good[0]:  # none yet or older
                        out[name] = good
        return out

    def series_many(self, pairs: list[tuple[object, str]], t0: float = -np.inf,
                    t1: float = np.inf, coarse: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
        """``series`` of each (device, metric) in ``pairs``: one lock hold, one read a stream."""
        lengths, t, v, _ = self.series_packed(pairs, t0, t1, coarse)
        ends = np.cumsum(lengths).tolist()
        return [(t[a:b], v[a:b]) for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    def series_packed(self, pairs: list[tuple[object, str]], t0: float = -np.inf,
                      t1: float = np.inf, coarse: bool = True, since: dict | None = None) -> Packed:
        """``series`` of every pair at once, packed: (lengths, times, values, cursor).

        The rows of ``pairs[i]`` (NaN dropped, time-sorted) are the ``lengths[i]`` rows after
        those of the pairs before it. One lock hold and a fixed number of numpy calls
        whatever the number of pairs, so 50 short sparkline reads cost about one read.
        ``since``, the ``cursor`` of an earlier call on this store, keeps only the
        full-resolution rows appended after that call (late ones included), so a reader
        that follows the store reads each row once.
        """
        pair, t, v, cursor = self.series_rows(pairs, t0, t1, coarse, since)
        return Packed(np.bincount(pair, minlength=len(pairs)), t, v, cursor)

    def series_rows(self, pairs: list[tuple[object, str]], t0: float = -np.inf,
                    t1: float = np.inf, coarse: bool = True, since: dict | None = None) -> Rows:
        """``series_packed`` with each row's pair in place of the rows per pair: the live
        panel's read, whose buckets are keyed by the row's pair."""
        with self.lock:
            reads, parts = self._plan(pairs)
            if since is None:
                got = [stream.pieces(t0, t1, coarse, names) for _, stream, names in reads]
            else:  # a stream with no new row (one read every few seconds) costs no call
                got = [stream.pieces_since(given, t0, t1, names) if stream.appended > given else ()
                       for key, stream, names in reads for given in (since.get(key, 0),)]
            cursor = {key: stream.appended for key, stream, _ in reads}
        ts: list[np.ndarray] = []
        vs: list[np.ndarray] = []
        owner: list[int] = []
        for i, read, col in parts:
            for t, cols in got[read]:
                ts.append(t)
                vs.append(cols[col])
                owner.append(i)
        if not ts:
            return Rows(np.zeros(0, np.int64), np.empty(0), np.empty(0), cursor)
        sizes = np.fromiter(map(len, ts), np.int64, len(ts))
        t = np.concatenate(ts)
        v = np.concatenate(vs, dtype=np.float64)
        pair = np.repeat(np.asarray(owner, np.int64), sizes)
        ok = v == v  # not NaN
        if not ok.all():
            t, v, pair = t[ok], v[ok], pair[ok]
        # A metric kept in two streams (a tick and a sample buffer): merge in time order.
        back = np.flatnonzero(t[1:] < t[:-1])  # mostly where one pair's rows end
        if len(back) and (pair[back] == pair[back + 1]).any():
            order = _sort_within(pair, t)
            t, v = t[order], v[order]
        return Rows(pair, t, v, cursor)

    def _plan(self, pairs: list[tuple[object, str]]):
        """Which streams ``series_packed`` reads for ``pairs`` (with the lock held), cached.

        Returns ((stream key, stream, columns) per stream read, (pair, read, column) per
        part). A panel asks for the same pairs every refresh; declare() clears the cache
        (and is the only place streams are made, so the plan may hold them).
        """
        key = tuple(pairs)
        plan = self._plans.get(key)
        if plan is None:
            wanted: dict[tuple[object, str], dict[str, int]] = {}
            found = []
            for i, (device, metric) in enumerate(pairs):
                for stream in self._where.get((device, metric), ()):
                    names = wanted.setdefault((device, stream), {})
                    found.append((i, (device, stream), names.setdefault(metric, len(names))))
            index = {k: j for j, k in enumerate(wanted)}
            plan = ([(k, self._streams[k], list(names)) for k, names in wanted.items()],
                    [(i, index[k], col) for i, k, col in found])
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def nbytes(self) -> int:
        """Bytes held by all streams' arrays."""
        with self.lock:
            return sum(s.nbytes() for s in self._streams.values())


def _sort_within(group: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Stable order of ``t`` within each run of ``group`` (non-decreasing ints)."""
    lo, hi = float(t.min()), float(t.max())
    width = 2.0 ** math.ceil(math.log2(hi - lo + 1.0))
    if lo > 0 and hi <= 2 * lo and (int(group[-1]) + 1) * width <= lo:
        # One float key, exact: t - lo is (Sterbenz) and every key fits lo's mantissa.
        return np.argsort(group * width + (t - lo), kind="stable")
    return np.lexsort((t, group))


def merge_series(parts_t: list[np.ndarray], parts_v: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """One time-sorted (times, values) from parts of a metric kept in several streams."""
    if not parts_t:
        return np.empty(0), np.empty(0)
    if len(parts_t) == 1:
        return parts_t[0], parts_v[0]
    t, v = np.concatenate(parts_t), np.concatenate(parts_v)
    order = np.argsort(t, kind="stable")
    return t[order], v[order]

