"""What views read from a sampler, as snapshots under its lock: newest values, status, alerts.
A "stale" or "failed" metric reads NaN in ``latest()``: a frozen value never looks live."""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from . import schedule
from .errors import BadArgumentError
from .metrics import BY_NAME, HOST_COLUMNS, HOST_KEY
from .sources.base import ProcessInfo

STALE_PERIODS = 3  # a metric not refreshed for this many of its periods is stale
_NEVER = (math.nan, math.nan)  # (newest, previous) refresh times of a metric never refreshed
_NO_ERRORS: dict = {}  # a device with no read error yet
NO_DIAGNOSTICS = ("this Sampler was created with diagnostics=False: no problems are looked for; "
                  "make it with diagnostics=True for alerts")


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


class SamplerReads:
    """The read half of ``nbgpu.Sampler``: ``latest()``, ``status()``, processes, alerts."""

    def alert_list(self, since_s: float | None = None) -> list:
        """Diagnostics alerts so far (``nbgpu.Alert``), oldest first; ``end`` is None while on.
        ``since_s`` (epoch seconds): only those on or ended since (``math.inf``: those on)."""
        if since_s is not None and (isinstance(since_s, bool) or not isinstance(since_s, numbers.Real)):
            raise BadArgumentError(f"since_s must be epoch seconds (a number) or None, got {since_s!r}")
        return [] if self.diagnostics is None else self.diagnostics.alert_list(since_s)

    @property
    def alerts(self):
        """``alert_list()`` as a DataFrame: rule, severity, gpu, start, end, message, ..."""
        if self.diagnostics is None:
            from .diagnostics.alerts import alerts_frame

            frame = alerts_frame([])
            frame.attrs["note"] = NO_DIAGNOSTICS
            return frame
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
        return self._clock() if self.running or self._last_step is None else self._last_step

    def _states(self, key, metrics: Iterable[str], now: float, supported: frozenset,
                never: dict) -> dict[str, str]:
        """"live", "stale", "failed" (a read failed after its newest refresh) or "unsupported" of
        each metric of ``key``, ``_lock`` held; ``never``: the period before a second refresh."""
        unsupported = self._unsupported.get(key, ())
        errors = self._error_at.get(key, _NO_ERRORS)  # metric (None: any) -> newest failure
        anyone = errors.get(None)
        refreshed = self._refreshed.get
        interval = self.interval
        out = {}
        for metric in metrics:
            if metric in unsupported or (supported and metric not in supported):
                out[metric] = "unsupported"
                continue
            error_at = errors.get(metric, anyone)
            newest, previous = refreshed((key, metric), _NEVER)
            if newest != newest:
                out[metric] = "stale" if error_at is None else "failed"
                continue
            period = never.get(metric, never[None]) if previous != previous else newest - previous
            if period < interval:
                period = interval
            age = now - newest
            if error_at is not None and error_at > newest and age > period + 1e-6:
                out[metric] = "failed"
            else:
                out[metric] = "stale" if age > STALE_PERIODS * period + 1e-6 else "live"
        return out

    def latest(self) -> list[dict]:
        """Per GPU: ``gpu``, ``name``, ``state``, ``time`` (UTC), ``time_s``, each metric's newest value
        (NaN unless live), ``states`` ({metric: "live"|"stale"|"failed"|"unsupported"}), ``last_good``."""
        import pandas as pd

        now = self._stale_now()
        lost = self.lost
        state = self.state
        out = []
        never = self._first_periods
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
            row.update(states=states, last_good=last_good)
            out.append(row)
        return out

    def _timestamp(self, t: float):
        """``t`` as a UTC ``pandas.Timestamp``; the last one made is kept (most refreshes reuse it)."""
        import pandas as pd

        if (made := self._timestamps.get(t)) is None:
            if len(self._timestamps) > 64:
                self._timestamps.clear()
            made = self._timestamps[t] = pd.Timestamp(t, unit="s", tz="UTC")
        return made

    @functools.cached_property
    def _first_periods(self) -> dict:
        """Each metric's period before its second refresh (its read's own; None: the rest), made once."""
        hint = getattr(self.source, "period_s", None)
        base = max(self.interval, schedule.MAX_BUFFER_DRAIN_S)
        out = {None: base, "energy_j": self._every["energy"], "pcie_rx_bytes_per_s": self._every["pcie"],
               "pcie_tx_bytes_per_s": self._every["pcie"]}
        if callable(hint):
            out.update({m: max(base, p) for m in BY_NAME if (p := hint(m)) is not None})
        return out

    def latest_host(self) -> dict:
        """Newest host readings (empty if host sampling is off); NaN where not live, as ``latest()``."""
        if self._host is None:
            return {}
        newest_of = self.store.last_many(HOST_KEY)
        now, never = self._stale_now(), self._first_periods
        with self._lock:
            states = self._states(HOST_KEY, HOST_COLUMNS, now, frozenset(), never)
        return {m: newest_of.get(m, (np.nan, np.nan))[1] if states[m] == "live" else math.nan
                for m in HOST_COLUMNS}
