"""Bounded, thread-safe storage of readings: chunked numpy columns per (device, stream)."""

from __future__ import annotations

import bisect
import itertools
import math
import threading
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .config import MIN_INTERVAL_S, check_seconds
from .store_stream import Stream, oldest_time

MAX_PLANS = 32  # read plans of series_rows kept (a panel uses one)
_NO_VALUE = (math.nan, math.nan)  # (time, value) of a metric with no good row kept


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
    every iteration and the store keeps 10,000 events), less those the store let go."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, str, int]] = []
        self._seq = 0  # the newest event read

    def update(self, store: Store) -> list[tuple[float, str, int]]:
        """``marks`` with the store's new marks added and its let-go ones dropped."""
        new = store.events_since(self._seq)
        if new:
            self._seq = new[-1].seq
            self.marks.extend((e.time, e.label, e.seq) for e in new if e.kind == "mark")
        with store.lock:
            kept_from = store.events[0].seq if store.events else math.inf  # older ones were let go
        if self.marks and self.marks[0][2] < kept_from:
            del self.marks[:bisect.bisect_left(self.marks, kept_from, key=lambda m: m[2])]
        return self.marks


class Store:
    """All readings of one sampler, keyed by (device key, stream name); by default an hour at full
    resolution, then 10 s buckets of mean/min/max for 24 hours."""

    def __init__(self, full_res_s: float = 3600.0, bucket_s: float = 10.0, history_s: float = 86400.0,
                 max_events: int = 10_000) -> None:
        self.full_res_s = check_seconds(full_res_s, "full_res_s", 0.0, math.inf)
        self.bucket_s = check_seconds(bucket_s, "bucket_s", MIN_INTERVAL_S, math.inf)
        self.history_s = check_seconds(history_s, "history_s", 0.0, math.inf)
        self._event_seq = 0
        self.lock = threading.Lock()
        self._streams: dict[tuple[object, str], Stream] = {}
        self._by_device: dict[object, dict[str, list[str]]] = {}  # device -> {metric: streams}
        self._device_streams: dict[object, list[Stream]] = {}  # in the order first declared
        self._plans: dict[tuple, tuple] = {}  # pairs -> what series_rows reads (see _plan)
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
                streams = self._by_device.setdefault(device, {}).setdefault(name, [])
                if stream not in streams:
                    streams.append(stream)

    def append_row(self, device: object, stream: str, t: float, values: dict[str, float]) -> None:
        """One row (missing columns NaN), kept only if newer than the stream's newest, as
        ``append_many`` keeps rows: a tick's reads, written with no array made."""
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
            newest_first = list(itertools.takewhile(lambda ev: ev.seq > seq, reversed(self.events)))
        return newest_first[::-1]

    def devices(self) -> list[object]:
        with self.lock:
            return list(dict.fromkeys(d for d, _ in self._streams))

    def streams_of(self, device: object) -> list[str]:
        with self.lock:
            return [s for (d, s) in self._streams if d == device]

    def metrics_of(self, device: object) -> list[str]:
        with self.lock:
            return list(self._by_device.get(device, ()))

    def read_stream(self, device: object, stream: str, t0: float = -np.inf, t1: float = np.inf,
                    coarse: bool = True):
        """Copy of a stream's rows in [t0, t1]: (times, {col: values}, decimated_mask)."""
        with self.lock:
            return self._streams[(device, stream)].read(t0, t1, coarse)

    def series(self, device: object, metric: str, t0: float = -np.inf, t1: float = np.inf,
               coarse: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of one metric of one device in [t0, t1], NaN rows dropped."""
        _, t, v, _ = self.series_rows([(device, metric)], t0, t1, coarse)  # every row is the pair's
        return t, v

    def last(self, device: object, metric: str) -> tuple[float, float]:
        """Newest (time, value) of a metric that is not NaN; (nan, nan) if none."""
        return self.last_many(device, (metric,)).get(metric, _NO_VALUE)

    def last_many(self, device: object,
                  names: tuple[str, ...] | None = None) -> dict[str, tuple[float, float]]:
        """Newest non-NaN (time, value) of every metric of ``device`` (or of ``names``) in one locked pass."""
        with self.lock:
            metrics = self._by_device.get(device)
            if not metrics:
                return {}
            out = dict.fromkeys(metrics if names is None else names, _NO_VALUE)
            for stream in self._device_streams[device]:
                good_of = stream._good
                goods = good_of if names is None else {n: good_of[n] for n in names if n in good_of}
                if not goods:
                    continue
                kept_from = oldest_time(stream.chunks)  # an older record was folded away
                for name, good in goods.items():
                    if good[0] >= kept_from and not out[name][0] >= good[0]:  # none yet or older
                        out[name] = good
        return out

    def series_many(self, pairs: list[tuple[object, str]], t0: float = -np.inf,
                    t1: float = np.inf, coarse: bool = True) -> list[tuple[np.ndarray, np.ndarray]]:
        """``series`` of each (device, metric) in ``pairs``: one lock hold, one read a stream."""
        pair, t, v, _ = self.series_rows(pairs, t0, t1, coarse)
        ends = np.cumsum(np.bincount(pair, minlength=len(pairs))).tolist()
        return [(t[a:b], v[a:b]) for a, b in zip([0, *ends], ends, strict=False)]  # (none: [])

    def series_rows(self, pairs: list[tuple[object, str]], t0: float = -np.inf,
                    t1: float = np.inf, coarse: bool = True, since: dict | None = None) -> tuple:
        """Rows of every pair one after another, NaN dropped: (each row's index in ``pairs``, epoch
        seconds, float64 values, cursor: {(device, stream): rows appended, ``since`` of the next read})."""
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
            return np.zeros(0, np.int64), np.empty(0), np.empty(0), cursor
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
        return pair, t, v, cursor

    def _plan(self, pairs: list[tuple[object, str]]):
        """Which streams ``series_rows`` reads for ``pairs`` (with the lock held), cached."""
        key = tuple(pairs)
        plan = self._plans.get(key)
        if plan is None:
            wanted: dict[tuple[object, str], dict[str, int]] = {}
            found = []
            for i, (device, metric) in enumerate(pairs):
                for stream in self._by_device.get(device, {}).get(metric, ()):
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
