"""The sampler: one background thread that reads a source and writes a store.

Nothing else touches the source while it runs; views, captures and exports read the
store. Every tick is guarded: an error is counted and kept in ``last_error``, a lost GPU
becomes an event, and the thread carries on.
"""

from __future__ import annotations

import logging
import math
import numbers
import threading
import time
import weakref
from collections.abc import Callable, Iterable

import numpy as np

from .errors import BadArgumentError
from .sources import Source, open_source
from .sources.host import COLUMNS as HOST_COLUMNS
from .sources.host import HOST_KEY, HostSource
from .store import Event, Store
from .timeline import Timeline

log = logging.getLogger("nbgpu")

DEFAULT_INTERVAL_S = 0.5
MAX_BUFFER_DRAIN_S = 1.0  # NVML keeps ~2.4 s of power samples: drain well within that

_running: weakref.WeakSet[Sampler] = weakref.WeakSet()


def running_samplers() -> list[Sampler]:
    """Samplers whose thread is alive in this process."""
    return [s for s in list(_running) if s.running]


def check_interval(interval: object, name: str = "interval") -> float:
    """``interval`` as a float of seconds, or BadArgumentError saying what is allowed."""
    if isinstance(interval, bool) or not isinstance(interval, numbers.Real):
        raise BadArgumentError(f"{name} must be a number of seconds > 0, got {interval!r}")
    value = float(interval)
    if not (math.isfinite(value) and 0 < value <= 3600):
        raise BadArgumentError(f"{name} must be a number of seconds > 0 and <= 3600, got {interval!r}")
    return value


class Sampler:
    """Samples every GPU of a source (and the host) from one background thread.

    Args:
        source: "auto" or "nvml" (real GPUs), "sim" (2 simulated GPUs), "prometheus=URL",
            a ``SimulatedGPUs`` or any object with the source interface.
        interval: seconds between ticks of cheap reads. Power and utilisation come from
            NVML's sample buffers at the card's own resolution whatever this is.
        gpus: indices of the GPUs to keep; None keeps all.
        host: also sample host CPU/RAM of the machine and of this process tree.
        energy_every_s, pcie_every_s, procs_every_s: how often the costly reads run.
        full_res_s, bucket_s, history_s: store bounds (see ``nbgpu.store``).
        diagnostics: run the diagnostics rules (``alert_list()``, ``alerts``, ``on_alert``).
        thresholds: ``nbgpu.Thresholds`` or a dict of the thresholds to change; None: defaults.
    """

    def __init__(self, source: object = "auto", interval: float = DEFAULT_INTERVAL_S,
                 gpus: Iterable[int] | None = None, *, host: bool = True,
                 energy_every_s: float = 5.0, pcie_every_s: float = 5.0,
                 procs_every_s: float = 2.0, full_res_s: float | None = None,
                 bucket_s: float | None = None, history_s: float | None = None,
                 clock: Callable[[], float] = time.time, diagnostics: bool = True,
                 thresholds: object = None) -> None:
        self.interval = check_interval(interval)
        self._every = {"energy": check_interval(energy_every_s, "energy_every_s"),
                       "pcie": check_interval(pcie_every_s, "pcie_every_s"),
                       "procs": check_interval(procs_every_s, "procs_every_s")}
        self._clock = clock
        self.source: Source = open_source(source)
        try:
            all_devices = self.source.devices()
            self._keep = self._select(all_devices, gpus)
        except Exception:
            self.source.close()
            raise
        self.devices: list[dict] = [d for d in all_devices if self._keeps(d)]
        self._kept_keys = {d["index"] for d in self.devices}
        select = getattr(self.source, "select", None)
        if callable(select):  # the source then reads only these devices
            select(self._kept_keys)
        store_kw = {k: v for k, v in (("full_res_s", full_res_s), ("bucket_s", bucket_s),
                                      ("history_s", history_s)) if v is not None}
        self.store = Store(**store_kw)
        for device, streams in self.source.streams().items():
            if self._keeps({"index": device}):
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
        self.lost: dict[object, float] = {}
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stop = False
        self._closed = False
        self._urgent: set[str] = set()
        self._listeners: list[Callable[[Sampler, float], None]] = []
        self.diagnostics = None  # the DiagnosticsEngine naming problems (nbgpu.diagnostics)
        if diagnostics:
            from .diagnostics import DiagnosticsEngine

            self.diagnostics = DiagnosticsEngine(thresholds)
            self.add_listener(self.diagnostics)

    @staticmethod
    def _select(devices: list[dict], gpus: Iterable[int] | None) -> set | None:
        if gpus is None:
            return None
        if isinstance(gpus, (int, str)):
            gpus = [gpus]
        top = [d["index"] for d in devices if not d.get("mig")]
        keep = set()
        for g in gpus:
            if isinstance(g, bool) or not isinstance(g, int) or g not in top:
                allowed = f"0 to {len(top) - 1}" if top else "none (no GPUs)"
                raise BadArgumentError(f"GPU index {g!r} is out of range; this machine has "
                                       f"{len(top)} GPU(s): {allowed}")
            keep.add(g)
        return keep

    def _keeps(self, device: dict) -> bool:
        if self._keep is None:
            return True
        key = device["index"]
        parent = int(str(key).split("/")[0]) if isinstance(key, str) and "/" in key else key
        return parent in self._keep

    # -- lifecycle ----------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def simulated(self) -> bool:
        return bool(getattr(self.source, "simulated", False))

    def start(self) -> Sampler:
        """Start the background thread (no-op if running); returns self."""
        if self._closed:
            raise BadArgumentError("this Sampler was stopped and closed; create a new one")
        if self.running:
            return self
        self._stop = False
        self._wake.clear()
        self.started_at = self._clock()
        self.stopped_at = None
        self.store.add_event(Event(self.started_at, "sampler", "started"))
        self._thread = threading.Thread(target=self._run, name="nbgpu-sampler", daemon=True)
        self._thread.start()
        _running.add(self)
        return self

    def stop(self, close: bool = True) -> None:
        """Stop and join the thread; ``close`` also releases NVML. Data stays readable."""
        if self._thread is not None:
            self._stop = True
            self._wake.set()
            self._thread.join(timeout=10)
            self._thread = None
            self.stopped_at = self._clock()
            self.store.add_event(Event(self.stopped_at, "sampler", "stopped"))
        _running.discard(self)
        if close and not self._closed:
            self._closed = True
            self.source.close()

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
        state = "running" if self.running else ("closed" if self._closed else "stopped")
        return (f"<nbgpu.Sampler {self.source.kind} {len(self.devices)} device(s) "
                f"every {self.interval:g}s, {state}, {self.ticks} ticks>")

    # -- what other parts of nbgpu ask of it ------------------------------------------------
    def mark(self, label: str, t: float | None = None) -> None:
        """Put a labelled mark on this sampler's timeline."""
        self.store.add_event(Event(self._clock() if t is None else t, "mark", str(label)))

    def request(self, read: str) -> None:
        """Ask the thread to do a costly read ("energy", "pcie", "procs") on its next wake-up."""
        self._urgent.add(read)
        self._wake.set()

    def add_listener(self, fn: Callable[[Sampler, float], None]) -> None:
        """Call ``fn(sampler, now)`` in the sampler thread after every tick (diagnostics)."""
        self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[Sampler, float], None]) -> None:
        if fn in self._listeners:
            self._listeners.remove(fn)

    def alert_list(self) -> list:
        """Diagnostics alerts so far (``nbgpu.Alert``), oldest first; ``end`` is None while on."""
        if self.diagnostics is None:
            return []
        if self.stopped_at is not None and not self.running:
            self.diagnostics.close_all()
        return self.diagnostics.alert_list()

    @property
    def alerts(self):
        """``alert_list()`` as a DataFrame: rule, severity, gpu, start, end, message, ..."""
        from .diagnostics import alerts_frame

        return alerts_frame(self.alert_list())

    def on_alert(self, fn: Callable) -> None:
        """Call ``fn(alert)`` in the sampler thread when an alert opens or escalates."""
        if self.diagnostics is None:
            raise BadArgumentError("this Sampler was created with diagnostics=False; no alerts")
        self.diagnostics.on_alert(fn)

    def latest(self) -> list[dict]:
        """Newest value of every metric of every GPU, with its device info and state."""
        out = []
        for dev in self.devices:
            state = "lost" if dev["index"] in self.lost else ("running" if self.running else "stopped")
            row = {"gpu": dev["index"], "name": dev["name"], "state": state}
            newest = np.nan
            for metric in self.store.metrics_of(dev["index"]):
                t, v = self.store.last(dev["index"], metric)
                row[metric] = v
                if not np.isnan(t):
                    newest = t if np.isnan(newest) else max(newest, t)
            row["time"] = newest
            out.append(row)
        return out

    def prometheus_text(self, hostname: str | None = None) -> str:
        """Newest GPU readings as Prometheus text, with dcgm-exporter's names where it has them."""
        from .exporter import prometheus_text

        return prometheus_text(self, hostname)

    def latest_host(self) -> dict:
        """Newest host readings (empty if host sampling is off)."""
        if self._host is None:
            return {}
        return {m: self.store.last(HOST_KEY, m)[1] for m in HOST_COLUMNS}

    # -- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        next_tick = self._clock()
        last_slow = {k: -math.inf for k in self._every}
        while not self._stop:
            now = self._clock()
            due = {k for k, every in self._every.items() if now - last_slow[k] >= every}
            due |= self._urgent
            self._urgent = set()
            for k in due:
                last_slow[k] = now
            full_tick = now >= next_tick - 1e-3
            self._tick(now, frozenset(due), full_tick)
            if full_tick:
                next_tick += self.interval
                if next_tick < now:  # fell behind (a slow read): skip, don't burst
                    next_tick = now + self.interval
            wait = min(next_tick, now + MAX_BUFFER_DRAIN_S) - self._clock()
            if wait > 0:
                self._wake.wait(wait)
            self._wake.clear()

    def _tick(self, now: float, due: frozenset[str], full_tick: bool) -> None:
        """One pass: "tick" in ``due`` asks the source for its cheap reads; buffers always."""
        try:
            reading = self.source.read(now, due | {"tick"} if full_tick else due)
            for batch in reading.batches:
                if batch.device not in self._kept_keys:
                    continue
                self.store.append_many(batch.device, batch.stream, batch.times, batch.values)
            for ev in reading.events:
                if ev.kind == "lost" and ev.device not in self.lost:
                    self.lost[ev.device] = now
                    log.warning(ev.message)
                self.store.add_event(Event(now, ev.kind, ev.message, ev.device))
            if self._host is not None and full_tick:
                values = self._host.read(now)
                if self._host_override is not None:
                    values.update(self._host_override(now - self.started_at) or {})
                self.store.append(HOST_KEY, "tick", now, values)
            if full_tick:
                self.ticks += 1
        except Exception as exc:  # a tick never kills the thread
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.debug("sampler tick failed", exc_info=True)
        for fn in list(self._listeners):
            try:
                fn(self, now)
            except Exception as exc:
                self.errors += 1
                self.last_error = f"listener {getattr(fn, '__name__', fn)}: {exc}"
