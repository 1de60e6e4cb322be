"""The sampler: one background thread that reads a source and writes a store.

Nothing else touches the source while it runs; views, captures and exports read the
store and the sampler's snapshots (``status()``, ``latest()``, ``processes()``). What is
read when comes from ``nbgpu.schedule.plan``, shared by the thread and ``step(now)``, so
tests drive a sampler with a fake clock and no thread. Every step is guarded: an error is
counted (per GPU too) and kept in ``last_error``, a lost GPU becomes an event, and the
thread carries on. ``stop()`` never waits on a hanging read for more than a second: the
thread closes the source itself once its last read returned.

Diagnostics live below the sampler: each ``Sampler(diagnostics=True)`` attaches a
``nbgpu.diagnostics`` engine as a tick listener when it is made, whatever was imported
first; ``Sampler(diagnostics=False)`` runs without one and says so in ``status()``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import math
import numbers
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from . import schedule
from .errors import BadArgumentError, SamplerStateError
from .metrics import HOST_COLUMNS, HOST_KEY
from .sources import Source, open_source
from .sources.base import Device, DeviceKey, ProcessInfo
from .sources.host import HostSource
from .store import Event, Store
from .timeline import Timeline

log = logging.getLogger("nbgpu")

# Memory, temperature, clocks and the like once a second, as often as the panel redraws;
# power and utilisation keep their native 20 ms / 200 ms from the sample buffers, and a
# capture reads memory every 10 ms while it is open.
DEFAULT_INTERVAL_S = 1.0
MIN_INTERVAL_S = 0.01  # faster polling costs a core and floods the store (issue: 1e-9 s)
MAX_INTERVAL_S = 3600.0
MAX_BUFFER_DRAIN_S = schedule.MAX_BUFFER_DRAIN_S
STOP_WAIT_S = 1.0  # stop() returns after this even if the thread is inside a hanging read
STALE_PERIODS = 3  # a metric not refreshed for this many of its periods is stale
# For this long after someone asks for the newest values (``watch()``; ``latest()`` asks),
# the source keeps its sample buffers drained at their live periods ("live" in its reads).
LIVE_HOLD_S = 5.0
MAX_XIDS_KEPT = 8  # GPU faults (XID events) kept for status(); the store keeps them as events
_LIVE = frozenset({"live"})
_NEVER = (math.nan, math.nan)  # (newest, previous) refresh times of a metric never refreshed

_running: weakref.WeakSet[Sampler] = weakref.WeakSet()
_atexit_lock = threading.Lock()
_atexit_registered = False
_diagnostics_factory: Callable[[Sampler, object], object] | None = None
NO_DIAGNOSTICS = ("this Sampler was created with diagnostics=False: no problems are looked for; "
                  "make it with diagnostics=True for alerts")


def running_samplers() -> list[Sampler]:
    """Samplers whose thread is running in this process."""
    return [s for s in list(_running) if s.running]


def check_interval(interval: object, name: str = "interval") -> float:
    """``interval`` as a float of seconds, or BadArgumentError saying what is allowed."""
    allowed = f"{name} must be a number of seconds from {MIN_INTERVAL_S:g} to {MAX_INTERVAL_S:g}"
    if isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise BadArgumentError(f"{allowed}, got {interval!r}")
    value = float(interval)
    if not math.isfinite(value) or value <= 0 or value > MAX_INTERVAL_S:
        raise BadArgumentError(f"{allowed}, got {interval!r}")
    if value < MIN_INTERVAL_S:
        raise BadArgumentError(f"{allowed}, got {interval!r}: below {MIN_INTERVAL_S * 1000:g} ms "
                               "the sampler would use a whole CPU core; power and utilisation "
                               "keep NVML's native resolution at any interval")
    return value


def set_diagnostics_factory(factory: Callable[[Sampler, object], object] | None) -> None:
    """Replace the engine factory ``factory(sampler, thresholds)``; None: nbgpu's own engine."""
    global _diagnostics_factory
    _diagnostics_factory = factory


def _stop_all_at_exit() -> None:
    """Interpreter exit: stop every running sampler and release its source."""
    for s in list(_running):
        with contextlib.suppress(Exception):
            s.stop(timeout_s=0.5)


@dataclass(frozen=True)
class SamplerStatus:
    """A consistent snapshot of a sampler's state, for views, magics and the CLI."""

    state: str  # "running" | "stopping" | "stopped" | "closed"
    ticks: int
    errors: int
    errors_by_gpu: dict = field(default_factory=dict)
    last_error: str | None = None
    last_error_by_gpu: dict = field(default_factory=dict)
    lost: dict = field(default_factory=dict)
    simulated: bool = False
    source_kind: str = ""
    source_description: str = ""
    resolution_note: str | None = None
    diagnostics: bool = True  # False: made with diagnostics=False, so no alerts are looked for
    xids: tuple = ()  # the newest GPU faults NVML reported: store Events, extra["code"] the XID


class Sampler:
    """Samples every GPU of a source (and the host) from one background thread.

    Args:
        source: "auto" or "nvml" (real GPUs), "sim" (2 simulated GPUs), "sim:N", "prometheus=URL",
            a ``SimulatedGPUs`` or any object with the source interface.
        interval: seconds between ticks of cheap reads (10 ms to 3600 s); None: the
            ``NbGpu.interval`` setting (1 s unless configured).
            Power and utilisation come from NVML's sample buffers at the card's own
            resolution whatever the interval.
        gpus: keys of the cards to keep (a card's MIG slices go with it); None keeps all.
        host: also sample host CPU/RAM of the machine and of this process tree.
        energy_every_s, pcie_every_s, procs_every_s: how often the costly reads run.
        full_res_s, bucket_s, history_s: store bounds (see ``nbgpu.store``); None: defaults.
        clock: seconds since the epoch; a fake clock plus ``step(now)`` drives it in tests.
        diagnostics: run the diagnostics rules (``alert_list()``, ``alerts``, ``on_alert``).
        thresholds: ``nbgpu.Thresholds`` or a dict of the thresholds to change; None: defaults.
    """

    def __init__(self, source: object = "auto", interval: float | None = None,
                 gpus: Iterable[DeviceKey] | None = None, *, host: bool = True,
                 energy_every_s: float = 15.0, pcie_every_s: float = 15.0,
                 procs_every_s: float = 2.0, full_res_s: float | None = None,
                 bucket_s: float | None = None, history_s: float | None = None,
                 clock: Callable[[], float] = time.time, diagnostics: bool = True,
                 thresholds: object = None) -> None:
        if interval is None:  # read now, not at import: %config NbGpu.interval applies
            from .config import settings

            interval = settings().interval
        self.interval = check_interval(interval)
        self._every = {"energy": check_interval(energy_every_s, "energy_every_s"),
                       "pcie": check_interval(pcie_every_s, "pcie_every_s"),
                       "procs": check_interval(procs_every_s, "procs_every_s")}
        store_kw = {k: v for k, v in (("full_res_s", full_res_s), ("bucket_s", bucket_s),
                                      ("history_s", history_s)) if v is not None}
        self.store = Store(**store_kw)  # checks the bounds before any source opens
        self._clock = clock
        self.source: Source = open_source(source)
        try:
            all_devices = self.source.devices()
            self._keep = self._select(all_devices, gpus)
        except Exception:
            self.source.close()
            raise
        self.devices: list[Device] = [d for d in all_devices if self._keeps(d)]
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
        self.timeline = Timeline(self.store, self.devices)
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
        self._error_at: dict[object, float] = {}  # device -> time of its newest read error
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
            try:
                factory = _diagnostics_factory
                if factory is None:
                    from .diagnostics.engine import attach as factory
                self.diagnostics = factory(self, thresholds)
            except Exception:
                self.source.close()
                raise

    @staticmethod
    def _select(devices: list[Device], gpus: Iterable[DeviceKey] | None) -> set | None:
        if gpus is None:
            return None
        if isinstance(gpus, (int, str)):
            gpus = [gpus]
        top = [d.key for d in devices if d.parent is None]
        keep = set()
        for g in gpus:
            if isinstance(g, bool) or not isinstance(g, (int, str)) or g not in top:
                numbered = top == list(range(len(top)))
                allowed = ("none (no GPUs)" if not top else f"0 to {len(top) - 1}" if numbered
                           else ", ".join(map(str, top)))
                raise BadArgumentError(f"GPU index {g!r} is out of range; this machine has "
                                       f"{len(top)} GPU(s): {allowed}")
            keep.add(g)
        return keep

    def _keeps(self, device: Device) -> bool:
        """Whether ``device`` was selected: a MIG slice goes with its card (``Device.card``)."""
        return self._keep is None or device.card in self._keep

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def state(self) -> str:
        """"running", "stopping" (its thread is still inside a read), "stopped" or "closed"."""
        t = self._thread
        if t is not None and t.is_alive():
            return "stopping" if self._stop_event.is_set() else "running"
        return "closed" if self._closed else "stopped"

    @property
    def running(self) -> bool:
        """Whether the thread runs and has not been asked to stop."""
        return self.state == "running"

    @property
    def simulated(self) -> bool:
        return bool(getattr(self.source, "simulated", False))

    def start(self) -> Sampler:
        """Start the background thread (no-op if running, safe from any thread); returns self."""
        global _atexit_registered
        with self._life:
            if self._closed or self._close_requested:
                raise SamplerStateError("this Sampler is closed (stop() released its source); "
                                        "create a new Sampler, or pause with stop(close=False) "
                                        "to start it again")
            t = self._thread
            if t is not None and t.is_alive():
                if self._stop_event.is_set():
                    raise SamplerStateError("this Sampler is still stopping (its thread is "
                                            "inside a read that has not returned); try again "
                                            "when status().state is 'stopped'")
                return self
            self._stop_event.clear()
            self._stop_overdue = False
            self._wake.clear()
            self.started_at = self._clock()
            self.stopped_at = None
            self.store.add_event(Event(self.started_at, "sampler", "started"))
            self._thread = threading.Thread(target=self._run, name="nbgpu-sampler", daemon=True)
            self._thread.start()
            _running.add(self)
        with _atexit_lock:
            if not _atexit_registered:
                atexit.register(_stop_all_at_exit)
                _atexit_registered = True
        return self

    def stop(self, close: bool = True, timeout_s: float = STOP_WAIT_S) -> None:
        """Stop the thread, waiting at most ``timeout_s``; ``close`` also releases the source.

        If the thread is inside a read that does not return in time, ``stop`` returns
        anyway: ``status().state`` says "stopping" until the thread ends, and the thread
        closes the source itself after its last read. Data stays readable.
        """
        with self._life:
            if close:
                self._close_requested = True
            t = self._thread
            if t is not None:
                self._stop_event.set()
                self._wake.set()
                if t is not threading.current_thread():
                    t.join(timeout_s)
                if t.is_alive():
                    self._stop_overdue = True  # a read hangs: its end makes no last drain
                    return
                self._thread = None
            _running.discard(self)
            if close:
                self._close_source()

    def _close_source(self) -> None:
        with self._close_lock:
            if not self._closed:
                self._closed = True
                self.source.close()
                if self._host is not None:
                    self._host.close()

    def _thread_ended(self) -> None:
        """The thread's last act: record the stop; close the source if that was asked."""
        self.stopped_at = self._clock()
        self.store.add_event(Event(self.stopped_at, "sampler", "stopped"))
        _running.discard(self)
        if self._close_requested:
            self._close_source()

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self) -> None:
        try:
            if not self._closed and not self.running:
                self.source.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return (f"<nbgpu.Sampler {self.source.kind} {len(self.devices)} device(s) "
                f"every {self.interval:g}s, {self.state}, {self.ticks} ticks>")

    # -- what other parts of nbgpu ask of it ------------------------------------------------
    def now(self) -> float:
        """The sampler's clock (epoch seconds; the fake clock it was given, in tests)."""
        return self._clock()

    def mark(self, label: str, t: float | None = None) -> None:
        """Put a labelled mark on this sampler's timeline."""
        self.store.add_event(Event(self._clock() if t is None else t, "mark", str(label)))

    def request(self, read: str) -> None:
        """Ask for a read ("energy", "pcie", "procs", or "edge") at the next step, never lost.

        "edge" reads memory used and drains every sample buffer at once: what a capture's
        end needs (with "energy" too when the block is long enough for the counter).
        """
        with self._lock:
            self._urgent.add(read)
        self._wake.set()

    @contextlib.contextmanager
    def fast_memory(self, every_s: float = 0.01) -> Iterator[Sampler]:
        """While held, also read memory used every ``every_s`` so short spikes are caught.

        Nesting is counted and thread-safe; the fastest lane held wins.
        """
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
        """Say that someone is looking at the newest values now (a live panel, an exporter,
        the diagnostics while a cell runs).

        For ``LIVE_HOLD_S`` the sample buffers are drained at their live periods (NVML
        utilisation every 2 s instead of 10 s); ``latest()`` calls it. Resolution is the same
        either way: only how old the newest buffered sample can be changes.
        """
        self._watched_at = self._clock()

    def drained_until(self, device: object, metric: str | None = None) -> float:
        """Clock time up to which every reading of ``device`` (or of its ``metric``) is in
        the store (inf: all).

        Samples NVML buffers reach the store at the buffer's next drain, seconds later; a
        writer folding them into ticks (the Recorder) writes no tick past this time, so a
        late sample is never counted in a later tick, and the diagnostics rules judge a
        buffered metric up to its own time.
        """
        fn = getattr(self.source, "drained_until", None)
        if not callable(fn):
            return math.inf
        return fn(device) if metric is None else fn(device, metric)

    def add_listener(self, fn: Callable[[Sampler, float], None]) -> None:
        """Call ``fn(sampler, now)`` in the sampler thread after every step (diagnostics)."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[Sampler, float], None]) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def alert_list(self, since_s: float | None = None) -> list:
        """Diagnostics alerts so far (``nbgpu.Alert``), oldest first; ``end`` is None while on.

        ``since_s`` (epoch seconds): only those still on or ended at or after it; ``math.inf``
        gives those on, as the live panel asks every refresh.
        """
        if self.diagnostics is None:
            return []
        if self.stopped_at is not None and not self.running:
            self.diagnostics.close_all()
        return self.diagnostics.alert_list(since_s)

    @property
    def alerts(self):
        """``alert_list()`` as a DataFrame: rule, severity, gpu, start, end, message, ..."""
        if self.diagnostics is None:
            import pandas as pd

            frame = pd.DataFrame(columns=["rule", "severity", "gpu", "start", "end", "duration_s",
                                          "active", "message", "suggestion", "evidence"])
            frame.attrs["note"] = NO_DIAGNOSTICS
            return frame
        self.alert_list()  # ends ongoing alerts of a stopped sampler
        return self.diagnostics.alerts

    def on_alert(self, fn: Callable) -> None:
        """Call ``fn(alert)`` in the sampler thread when an alert opens or escalates."""
        if self.diagnostics is None:
            raise BadArgumentError(NO_DIAGNOSTICS)
        self.diagnostics.on_alert(fn)

    @property
    def lost(self) -> dict[object, float]:
        """GPUs lost so far and when (a copy: safe to iterate while the thread runs)."""
        with self._lock:
            return dict(self._lost)

    def processes(self) -> dict[object, list[ProcessInfo]]:
        """The newest process lists per GPU (a copy taken under a lock)."""
        with self._lock:
            return {k: list(v) for k, v in self._processes.items()}

    def status(self) -> SamplerStatus:
        """A snapshot of state, ticks and errors (total and per GPU), lost GPUs and source."""
        note = getattr(self.source, "resolution_note", None)
        note = note() if callable(note) else note
        try:
            description = self.source.describe()
        except Exception as exc:
            description = f"{self.source.kind} ({type(exc).__name__})"
        with self._lock:
            return SamplerStatus(
                state=self.state, ticks=self.ticks, errors=self.errors,
                errors_by_gpu=dict(self._errors_by_gpu), last_error=self.last_error,
                last_error_by_gpu=dict(self._last_error_by_gpu), lost=dict(self._lost),
                simulated=self.simulated, source_kind=str(self.source.kind),
                source_description=description, resolution_note=note,
                diagnostics=self.diagnostics is not None, xids=self._xids)

    def _stale_now(self) -> float:
        if self.running:
            return self._clock()
        return self._last_step if self._last_step is not None else self._clock()

    def _states(self, key, metrics: Iterable[str], now: float, supported: frozenset,
                never: float) -> dict[str, str]:
        """"live", "stale", "failed" or "unsupported" of each metric of device ``key``.

        Called with ``_lock`` held. Unsupported: the card does not report it (``supported``,
        empty for "all") or NVML said so; failed: a read failed after its newest refresh;
        stale: not refreshed for ``STALE_PERIODS`` of its own periods. ``never``: the period
        assumed before a metric's second refresh (the longest of any read). NaN tests are ``x != x``
        and the period's floor a comparison: the panel asks this for every metric each refresh.
        """
        unsupported = self._unsupported.get(key, ())
        error_at = self._error_at.get(key)
        refreshed = self._refreshed.get
        interval = self.interval
        unrefreshed = "stale" if error_at is None else "failed"
        out = {}
        for metric in metrics:
            if metric in unsupported or (supported and metric not in supported):
                out[metric] = "unsupported"
                continue
            newest, previous = refreshed((key, metric), _NEVER)
            if newest != newest:
                out[metric] = unrefreshed
                continue
            period = never if previous != previous else newest - previous
            if period < interval:
                period = interval
            age = now - newest
            if error_at is not None and error_at > newest and age > period + 1e-6:
                out[metric] = "failed"
            else:
                out[metric] = "stale" if age > STALE_PERIODS * period + 1e-6 else "live"
        return out

    def latest(self, watch: bool = True) -> list[dict]:
        """Newest value of every metric of every GPU, with its state.

        ``watch=False`` reads without keeping the sampler's buffers live for a viewer (a
        recorder that nobody looks at).

        Each row: ``gpu``, ``name``, ``state`` (of the device), ``time`` (UTC
        ``pandas.Timestamp`` of the newest reading), ``time_s`` (the same as epoch
        seconds), one value per metric, ``states`` ({metric: "live" | "stale" | "failed"
        | "unsupported"}) and ``last_good`` ({metric: newest good value}). A metric that
        is not live reads NaN, so a frozen value never looks live. The values are copies
        of the store's newest-row records (no search), as the live panel asks every refresh.
        """
        import pandas as pd

        if watch:
            self.watch()
        now = self._stale_now()
        lost = self.lost
        state = self.state
        out = []
        with self._lock:  # the period before a metric's second refresh: the longest of any read
            never = max(self.interval, MAX_BUFFER_DRAIN_S, *self._every.values())
        for dev in self.devices:
            key = dev.key
            newest_of = self.store.last_many(key)
            with self._lock:
                states = self._states(key, newest_of, now, frozenset(dev.metrics), never)
            row = {"gpu": key, "name": dev.name, "state": "lost" if key in lost else state}
            last_good = {}
            newest = -math.inf
            for metric, (t, v) in newest_of.items():
                row[metric] = v if states[metric] == "live" else math.nan
                last_good[metric] = v
                if t > newest:  # NaN (never read) compares False
                    newest = t
            if newest == -math.inf:
                row["time"], row["time_s"] = pd.NaT, math.nan
            else:
                row["time"], row["time_s"] = self._timestamp(newest), float(newest)
            row["states"] = states
            row["last_good"] = last_good
            out.append(row)
        return out

    def _timestamp(self, t: float):
        """``t`` as a UTC ``pandas.Timestamp``; the last one made is kept (most refreshes reuse it)."""
        import pandas as pd

        made = self._timestamps.get(t)
        if made is None:
            if len(self._timestamps) > 64:
                self._timestamps.clear()
            made = self._timestamps[t] = pd.Timestamp(t, unit="s", tz="UTC")
        return made

    def latest_host(self) -> dict:
        """Newest host readings (empty if host sampling is off)."""
        if self._host is None:
            return {}
        newest_of = self.store.last_many(HOST_KEY)
        return {m: newest_of.get(m, (np.nan, np.nan))[1] for m in HOST_COLUMNS}

    # -- one step: what the thread does at each wake-up --------------------------------------
    def _settings(self) -> schedule.Settings:
        fast = min(self._fast) if self._fast else None
        return schedule.Settings(self.interval, self._every, MAX_BUFFER_DRAIN_S, fast)

    def next_wake(self) -> float:
        """When the thread wakes next (clock seconds), as the last step planned; -inf before any."""
        return self._wake_at

    def step(self, now: float | None = None) -> None:
        """Do what the thread would do at time ``now``: the due reads, store writes, listeners.

        ``now`` None reads the clock after taking the pending requests (what the thread does),
        so a request made after that reading, stamped later, waits for the next step.
        """
        if self._closed:
            raise SamplerStateError("this Sampler is closed; create a new Sampler to sample again")
        with self._step_lock:
            with self._lock:
                urgent = frozenset(self._urgent)
                self._urgent.clear()
                settings = self._settings()
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

    def _count_error(self, device, message: str, now: float) -> None:
        with self._lock:
            self.errors += 1
            self.last_error = message
            if device is not None:
                self._errors_by_gpu[device] = self._errors_by_gpu.get(device, 0) + 1
                self._last_error_by_gpu[device] = message
                self._error_at[device] = now

    def _note_refreshed(self, device, values: dict, now: float) -> None:
        for metric, arr in values.items():
            if isinstance(arr, float):  # a tick's one value: no array calls
                fresh = arr == arr
            else:
                fresh = len(arr) > 0 and not np.isnan(np.asarray(arr, dtype=np.float64)).all()
            if fresh:
                newest, _ = self._refreshed.get((device, metric), (math.nan, math.nan))
                if newest != now:
                    self._refreshed[(device, metric)] = (now, newest)

    def _read(self, now: float, reads: frozenset[str]) -> None:
        """One pass over the source ("tick" in ``reads``: cheap reads, host, a counted tick)."""
        full_tick = "tick" in reads
        if now - self._watched_at <= LIVE_HOLD_S:
            reads = reads | _LIVE
        try:
            reading = self.source.read(now, reads)
            for batch in reading.batches:
                if batch.device not in self._kept_keys:
                    continue
                if batch.one_row:
                    self.store.append_row(batch.device, batch.stream, batch.times, batch.values)
                else:
                    self.store.append_many(batch.device, batch.stream, batch.times, batch.values)
                with self._lock:
                    self._note_refreshed(batch.device, batch.values, now)
            for err in getattr(reading, "errors", ()):
                self._count_error(err.device, f"GPU {err.device} {err.read}: {err.message}", now)
            for ev in reading.events:
                self._on_event(ev, now)
            if "procs" in reads:
                self._snapshot_processes()
            if self._host is not None and full_tick:
                values = self._host.read(now)
                if self._host_override is not None:
                    values.update(self._host_override(now - self.started_at) or {})
                self.store.append(HOST_KEY, "tick", now, values)
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

    def _snapshot_processes(self) -> None:
        procs = getattr(self.source, "processes", None)
        procs = procs() if callable(procs) else procs
        if not procs:
            return
        snap = {k: list(v) for k, v in dict(procs).items()
                if k in self._kept_keys}
        with self._lock:
            self._processes.update(snap)

    def _run(self) -> None:
        try:
            while not self._stop_event.is_set():
                self._wake.clear()
                self.step()
                wait = self._wake_at - self._clock()
                if wait > 0 and not self._stop_event.is_set():
                    self._wake.wait(wait)
            if not self._stop_overdue:  # the last step drains what the buffers still hold
                self.request("edge")
                self.step()
        except SamplerStateError:
            pass
        finally:
            self._thread_ended()
