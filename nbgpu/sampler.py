"""The sampler: the one thread that reads a source (on ``schedule.plan``, as ``step(now)`` does with
a fake clock) and writes a store; errors are counted and it carries on. Parts: ``sampler_thread``
(lifecycle), ``sampler_reads`` (what views read)."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from . import schedule
from .config import check_interval, settings
from .errors import BadArgumentError, FileError, SamplerStateError
from .metrics import HOST_COLUMNS, HOST_KEY
from .sampler_reads import SamplerReads
from .sampler_thread import SamplerThread
from .sources import Source, open_source
from .sources.base import Device, DeviceKey, ProcessInfo, check_gpus
from .sources.host import HostSource
from .store import Event, Store
from .timeline import Timeline

log = logging.getLogger("nbgpu")

MAX_XIDS_KEPT = 8  # GPU faults (XID events) kept for status(); the store keeps them as events
_LIVE = frozenset({"live"})

REQUESTS = ("energy", "pcie", "procs", "edge")  # what request() may ask for


def check_sampler(sampler: object, source: object = None, interval: object = None) -> None:
    """BadArgumentError unless ``sampler`` is None or a Sampler given without source/interval."""
    if sampler is None:
        return
    if not isinstance(sampler, Sampler):
        raise BadArgumentError(f"sampler must be an nbgpu.Sampler, got {sampler!r}")
    if source is not None or interval is not None:
        raise BadArgumentError("give either sampler= or source=/interval=, not both")


class Sampler(SamplerThread, SamplerReads):
    """Samples every GPU of a source (and the host) from one background thread. ``source``: "auto",
    "nvml", "sim", "sim:N", "prometheus=URL" or a source object; ``interval``: tick seconds (None:
    ``NbGpu.interval``); ``gpus``: card keys kept; ``*_every_s``: the costly reads; ``full_res_s``,
    ``bucket_s``, ``history_s``: store bounds; ``clock`` with ``step(now)`` drives it in tests;
    ``diagnostics``: run the rules (``alert_list()``, ``on_alert``) with ``thresholds``."""

    def __init__(self, source: object = "auto", interval: float | None = None,
                 gpus: Iterable[DeviceKey] | None = None, *, host: bool = True,
                 energy_every_s: float = 15.0, pcie_every_s: float = 15.0,
                 procs_every_s: float = 2.0, full_res_s: float | None = None,
                 bucket_s: float | None = None, history_s: float | None = None,
                 clock: Callable[[], float] = time.time, diagnostics: bool = True,
                 thresholds: object = None) -> None:
        # None: read now, not at import, so %config NbGpu.interval applies
        self.interval = check_interval(settings().interval if interval is None else interval)
        self._every = {read: check_interval(every, f"{read}_every_s") for read, every in
                       (("energy", energy_every_s), ("pcie", pcie_every_s), ("procs", procs_every_s))}
        bounds = {"full_res_s": full_res_s, "bucket_s": bucket_s, "history_s": history_s}
        self.store = Store(**{k: v for k, v in bounds.items() if v is not None})  # before a source opens
        if not callable(clock):
            raise BadArgumentError(f"clock must be a function giving epoch seconds, got {clock!r}")
        self._clock = clock
        self.source: Source = open_source(source)
        try:
            all_devices = self.source.devices()
            keep = check_gpus(gpus, [d.key for d in all_devices if d.parent is None])
        except Exception:
            self.source.close()
            raise
        # a MIG slice goes with its card (``Device.card``)
        self.devices: list[Device] = [d for d in all_devices if keep is None or d.card in keep]
        self._kept_keys = {d.key for d in self.devices}
        select = getattr(self.source, "select", None)
        if callable(select):  # the source then reads only these devices
            select(self._kept_keys)
        for device, streams in self.source.streams().items():
            if device in self._kept_keys:
                for name, cols in streams.items():
                    self.store.declare(device, name, cols)
        self._host = HostSource() if host else None
        # Simulated scenarios may stand in for the host's CPU (e.g. a busy input pipeline).
        self._host_override = getattr(self.source, "simulated_host", None)
        if self._host is not None:
            self.store.declare(HOST_KEY, "tick", HOST_COLUMNS)
        drained = getattr(self.source, "drained_until", None)  # the source's: no cycle through self
        self.timeline = Timeline(self.store, self.devices, drained=drained if callable(drained) else None)
        self.ticks = 0
        self.errors = 0
        self.last_error: str | None = None
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        # _lock guards the small shared state below; _step_lock serialises steps;
        # _life serialises start/stop; _close_lock makes closing the source happen once.
        self._lock = threading.Lock()
        self._step_lock = threading.Lock()
        self._life = threading.RLock()
        self._close_lock = threading.Lock()
        self._lost: dict[object, float] = {}
        self._xids: tuple[Event, ...] = ()
        self._errors_by_gpu: dict[object, int] = {}
        self._last_error_by_gpu: dict[object, str] = {}
        self._error_at: dict[object, dict] = {}  # device -> {metric (None: any): newest error}
        self._unsupported: dict[object, set[str]] = {}
        self._refreshed: dict[tuple[object, str], tuple[float, float]] = {}  # newest, previous
        self._timestamps: dict[float, object] = {}  # latest()'s newest times, made once
        self._processes: dict[object, list[ProcessInfo]] = {}
        self._urgent: set[str] = set()
        self._fast: list[float] = []
        self._watched_at = -math.inf  # clock time of the newest watch()
        self._sched = schedule.State()
        self._wake_at = -math.inf
        self._last_step: float | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stop_event = threading.Event()
        self._close_requested = False
        self._stop_overdue = False
        self._closed = False
        self._listeners: list[Callable[[Sampler, float], None]] = []
        self.diagnostics = None  # the DiagnosticsEngine naming problems (nbgpu.diagnostics)
        if diagnostics:
            configured = settings().thresholds_file if thresholds is None else ""
            try:
                from .diagnostics.engine import attach

                self.diagnostics = attach(self, configured or thresholds)
            except Exception as exc:
                self.source.close()
                if configured and isinstance(exc, FileError):  # say where the file was named
                    raise FileError(f"{exc} (NbGpu.thresholds_file)", path=exc.path) from None
                if configured and isinstance(exc, BadArgumentError):
                    raise BadArgumentError(f"{exc} (NbGpu.thresholds_file)") from None
                raise

    def now(self) -> float:
        """The sampler's clock (epoch seconds; the fake clock it was given, in tests)."""
        return self._clock()

    def mark(self, label: str, t: float | None = None) -> None:
        """Put a labelled mark on this sampler's timeline."""
        self.store.add_event(Event(self._clock() if t is None else t, "mark", str(label)))

    def request(self, read: str) -> None:
        """Ask for a read ("energy", "pcie", "procs", or "edge") at the next step, never lost.
        "edge" reads memory used and drains every sample buffer at once (a capture's end)."""
        if read not in REQUESTS:
            raise BadArgumentError(f"request() takes one of {', '.join(REQUESTS)}, got {read!r}")
        with self._lock:
            self._urgent.add(read)
        self._wake.set()

    @contextlib.contextmanager
    def fast_memory(self, every_s: float = 0.01) -> Iterator[Sampler]:
        """While held, also read memory used every ``every_s`` (short spikes); the fastest held wins."""
        every_s = check_interval(every_s, "every_s")
        with self._lock:
            self._fast.append(every_s)
        self._wake.set()
        try:
            yield self
        finally:
            with self._lock:
                self._fast.remove(every_s)

    def watch(self) -> None:
        """Someone looks at the newest values now (a panel refresh, a scrape, a running cell): for
        ``schedule.LIVE_HOLD_S`` buffers drain at their watched periods (``schedule.drain_every_s``)."""
        self._watched_at = self._clock()

    def drained_until(self, device: object, metric: str | None = None) -> float:
        """Clock time up to which every reading of ``device`` (or its ``metric``) is in the store
        (inf: all); buffered samples arrive at the buffer's next drain, seconds later."""
        fn = getattr(self.source, "drained_until", None)
        if not callable(fn):
            return math.inf
        return fn(device) if metric is None else fn(device, metric)

    def add_listener(self, fn: Callable[[Sampler, float], None]) -> None:
        """Call ``fn(sampler, now)`` in the sampler thread after every step (diagnostics)."""
        if not callable(fn):
            raise BadArgumentError(f"add_listener needs a function fn(sampler, now), got {fn!r}")
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[Sampler, float], None]) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def next_wake(self) -> float:
        """When the thread wakes next (clock seconds), as the last step planned; -inf before any."""
        return self._wake_at

    def step(self, now: float | None = None) -> None:
        """Do what the thread would do at ``now``: the due reads, store writes, listeners.
        ``now`` None reads the clock after taking the pending requests (as the thread does)."""
        if self._closed:
            raise SamplerStateError("this Sampler is closed; create a new Sampler to sample again")
        with self._step_lock:
            with self._lock:
                urgent = frozenset(self._urgent)
                self._urgent.clear()
                settings = schedule.Settings(self.interval, self._every, min(self._fast, default=None))
            if now is None:
                now = self._clock()
            if self.started_at is None:
                self.started_at = now
            p = schedule.plan(now, settings, self._sched, urgent)
            self._sched = p.state
            self._wake_at = p.wake_at
            self._last_step = now
            self._read(now, p.reads)
            with self._lock:
                listeners = list(self._listeners)
            for fn in listeners:
                try:
                    fn(self, now)
                except Exception as exc:
                    self._count_error(None, f"listener {getattr(fn, '__name__', fn)}: {exc}", now)

    def _count_error(self, device, message: str, now: float, metrics: tuple[str, ...] = ()) -> None:
        with self._lock:
            self.errors += 1
            self.last_error = message
            if device is not None:
                self._errors_by_gpu[device] = self._errors_by_gpu.get(device, 0) + 1
                self._last_error_by_gpu[device] = message
                for metric in metrics or (None,):
                    self._error_at.setdefault(device, {})[metric] = now

    def _note_refreshed(self, device, values: dict, now: float) -> None:
        for metric, arr in values.items():
            fresh = (arr == arr if isinstance(arr, float)  # a tick's one value: no array calls
                     else len(arr) > 0 and not np.isnan(np.asarray(arr, dtype=np.float64)).all())
            if fresh:
                newest, _ = self._refreshed.get((device, metric), (math.nan, math.nan))
                if newest != now:
                    self._refreshed[(device, metric)] = (now, newest)

    def _read(self, now: float, reads: frozenset[str]) -> None:
        """One pass over the source ("tick" in ``reads``: cheap reads, host, a counted tick)."""
        full_tick = "tick" in reads
        if now - self._watched_at <= schedule.LIVE_HOLD_S:
            reads = reads | _LIVE
        try:
            reading = self.source.read(now, reads)
            for batch in reading.batches:
                if batch.device not in self._kept_keys:
                    continue
                append = self.store.append_row if batch.one_row else self.store.append_many
                append(batch.device, batch.stream, batch.times, batch.values)
                with self._lock:
                    self._note_refreshed(batch.device, batch.values, now)
            for err in getattr(reading, "errors", ()):
                where = "" if err.device is None else f"GPU {err.device} {err.read}: "
                self._count_error(err.device, where + err.message, now, getattr(err, "metrics", ()))
            for ev in reading.events:
                self._on_event(ev, now)
            if "procs" in reads and (procs := getattr(self.source, "processes", None)) is not None:
                procs = procs() if callable(procs) else procs
                if snap := {k: list(v) for k, v in dict(procs or {}).items() if k in self._kept_keys}:
                    with self._lock:
                        self._processes.update(snap)
            if self._host is not None and full_tick:
                values = self._host.read(now)
                if self._host_override is not None:
                    values.update(self._host_override(now - self.started_at) or {})
                self.store.append_row(HOST_KEY, "tick", now, values)
                with self._lock:
                    self._note_refreshed(HOST_KEY, {k: float(v) for k, v in values.items()}, now)
            if full_tick:
                with self._lock:
                    self.ticks += 1
        except Exception as exc:  # a step never kills the thread
            self._count_error(None, f"{type(exc).__name__}: {exc}", now)
            log.debug("sampler step failed", exc_info=True)

    def _on_event(self, ev, now: float) -> None:
        with self._lock:
            if ev.kind == "lost" and ev.device not in self._lost:
                self._lost[ev.device] = now
                log.warning(ev.message)
            if ev.kind == "unsupported":
                self._unsupported.setdefault(ev.device, set()).update(getattr(ev, "metrics", ()))
        code = getattr(ev, "code", None)
        event = Event(now, ev.kind, ev.message, ev.device, {} if code is None else {"code": code})
        if ev.kind == "xid":
            with self._lock:
                seen = any(x.device == ev.device and x.extra == event.extra for x in self._xids)
                self._xids = (*self._xids, event)[-MAX_XIDS_KEPT:]
            if not seen:  # a storm of one XID is logged once
                log.warning(ev.message)
        self.store.add_event(event)
