"""GPUs of many nodes read back from a Prometheus server (dcgm-exporter's or ``nbgpu export``'s
series), keyed "node/gpu", at Prometheus' own sample times. Down, slow or garbage never raises
out of ``read`` nor blocks long: time and size limits, back-off, ``state`` and ``last_error``.
Also the Prometheus names of nbgpu's metrics both ways: ``FAMILIES`` (what the exporter serves)
and ``BY_SERIES`` (what the source reads back)."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import math
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field

import numpy as np

from ..errors import BadArgumentError, SourceError
from ..metrics import BY_NAME, GPU_METRICS, Metric, plausible
from .base import Batch, Device, DeviceEvent, ReadError, Reading

log = logging.getLogger("nbgpu")

MIB = 2.0**20
INFO_SERIES = "nbgpu_gpu_info"

# nbgpu's name suffix -> Prometheus base-unit suffix, for metrics dcgm-exporter lacks.
_SUFFIXES = {"_bytes_per_s": "_bytes_per_second", "_bytes": "_bytes", "_pct": "_percent", "_w": "_watts",
             "_c": "_celsius", "_mhz": "_megahertz", "_j": "_joules"}


@dataclass(frozen=True)
class Family:
    """How one nbgpu metric appears in Prometheus: series name, scale, help text."""

    metric: str
    name: str
    scale: float  # multiply nbgpu's value by this to get the series' value
    help: str


def family_of(m: Metric) -> Family:
    """The series one metric is exported as (dcgm-exporter's name where it has one)."""
    if m.dcgm:
        unit = {0.01: "ratio", 1000.0: "mJ"}.get(m.dcgm_scale, {"B": "MiB"}.get(m.unit, m.unit))
        return Family(m.name, m.dcgm, m.dcgm_scale, f"{m.description} (in {unit}).")
    for suffix, prom in _SUFFIXES.items():
        if m.name.endswith(suffix):
            return Family(m.name, "nbgpu_gpu_" + m.name[: -len(suffix)] + prom, 1.0,
                          f"{m.description} (in {m.unit}).")
    return Family(m.name, "nbgpu_gpu_" + m.name, 1.0, f"{m.description} ({m.unit}).")


FAMILIES: tuple[Family, ...] = tuple(family_of(m) for m in GPU_METRICS)

# nbgpu metric -> [(series name, multiply the series value by this)], best first.
SERIES: dict[str, list[tuple[str, float]]] = {}
for _fam in FAMILIES:
    SERIES.setdefault(_fam.metric, []).append((_fam.name, 1.0 / _fam.scale))
_OLDER: dict[str, list[tuple[str, float]]] = {
    "util_pct": [("dcgm_gpu_utilization", 1.0)],
    "mem_util_pct": [("dcgm_mem_copy_utilization", 1.0)],
    "mem_used_bytes": [("dcgm_fb_used", MIB)],
    "mem_total_bytes": [("DCGM_FI_DEV_FB_TOTAL", MIB)],
    "temp_c": [("dcgm_gpu_temp", 1.0)],
    "power_w": [("DCGM_FI_DEV_POWER_USAGE_INSTANT", 1.0), ("dcgm_power_usage", 1.0)],
    "power_limit_w": [("DCGM_FI_DEV_POWER_MGMT_LIMIT", 1.0), ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 1.0)],
    "sm_clock_mhz": [("dcgm_sm_clock", 1.0)],
    "mem_clock_mhz": [("dcgm_memory_clock", 1.0)],
    "clock_event_reasons": [("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 1.0)],
    "energy_j": [("dcgm_total_energy_consumption", 1e-3)],
    "enc_util_pct": [("dcgm_enc_utilization", 1.0)],
    "dec_util_pct": [("dcgm_dec_utilization", 1.0)],
}
for _metric, _names in _OLDER.items():
    SERIES.setdefault(_metric, []).extend(_names)

# Series combined into a metric afterwards: free framebuffer gives the total with "used".
FB_FREE = {"DCGM_FI_DEV_FB_FREE": MIB, "dcgm_fb_free": MIB}

# series name -> (nbgpu metric, factor, priority: lower wins when two series say the same)
BY_SERIES: dict[str, tuple[str, float, int]] = {
    name: (metric, factor, rank) for metric, names in SERIES.items()
    for rank, (name, factor) in enumerate(names)
}


def selector() -> str:
    """A PromQL series selector matching every series this module understands."""
    names = sorted(set(BY_SERIES) | set(FB_FREE) | {INFO_SERIES})
    return '{__name__=~"' + "|".join(names) + '"}'


def is_blank(value: float) -> bool:
    """Whether ``value`` is NaN, infinite or one of DCGM's blank sentinels (int32, int64, fp64)."""
    return (not math.isfinite(value) or 2147483632.0 <= value <= 2147483647.0
            or value >= 9223372036854775792.0 or 140737488355328.0 <= value <= 140737488355343.0)

STREAM = "scrape"  # not "tick": rows arrive at Prometheus' times, not the sampler's
DEFAULT_TIMEOUT_S = 3.0
DEFAULT_MAX_BYTES = 16 * 2**20
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
DISCOVER_WINDOW_S = 300.0
MAX_WINDOW_S = 600.0
HEADERS = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}


@dataclass
class _Series:
    """One GPU's rows from one read: {time: {metric: value}} plus the labels that named it."""

    host: str
    gpu: str
    labels: dict[str, str] = field(default_factory=dict)
    rows: dict[float, dict[str, float]] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)
    simulated: bool = False


def parse_matrix(payload: object) -> dict[str, _Series]:
    """Rows per device key from a Prometheus query answer of type "matrix" (or "vector");
    ValueError when the answer is not what the Prometheus API documents."""
    if not isinstance(payload, dict) or payload.get("status") != "success":
        err = payload.get("error") if isinstance(payload, dict) else None
        raise ValueError(f"Prometheus answered an error: {err}" if err else "not a Prometheus API answer")
    data = payload["data"] if isinstance(payload.get("data"), dict) else {}
    result = data.get("result") if data.get("resultType") in ("matrix", "vector") else None
    if not isinstance(result, list) or not all(isinstance(i, dict) and isinstance(i.get("metric"), dict)
                                               for i in result):
        raise ValueError("Prometheus answer has no matrix or vector result of labelled series")
    out: dict[str, _Series] = {}
    free: dict[str, dict[float, float]] = {}
    for item in result:
        labels = {k: v for k, v in item["metric"].items() if isinstance(v, str)}  # the API's labels are text
        name = labels.get("__name__", "")
        if not (gpu := labels.get("gpu")):
            continue  # names no GPU
        host = (labels.get("Hostname") or labels.get("hostname") or labels.get("instance") or "?").strip()
        gpu = f"{gpu}/{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else gpu
        series = out.setdefault(key := f"{host}/{gpu}", _Series(host, gpu))
        if not series.labels or name == INFO_SERIES:
            series.labels = {k: v for k, v in labels.items() if k != "__name__"}
        if name == INFO_SERIES:
            series.simulated = labels.get("simulated") == "true"
            continue
        points = item["values"] if "values" in item else [item["value"]] if "value" in item else None
        if not isinstance(points, list):
            raise ValueError("Prometheus result item without values")
        if name in FB_FREE:
            scale = FB_FREE[name]
            free.setdefault(key, {}).update((t, v * scale) for t, v in _points(points, "mem_used_bytes"))
            continue
        if name not in BY_SERIES:
            continue
        metric, factor, rank = BY_SERIES[name]
        if series.ranks.get(metric, rank) < rank:
            continue  # a better-named series already holds this metric
        if series.ranks.get(metric, rank) > rank:
            for row in series.rows.values():
                row.pop(metric, None)
        series.ranks[metric] = rank
        for t, v in _points(points, metric, factor):
            series.rows.setdefault(t, {})[metric] = v * factor
    for key, by_time in free.items():  # total = used + free where no total is reported
        series = out[key]
        for t, f in by_time.items():
            row = series.rows.get(t)
            if row and "mem_used_bytes" in row and "mem_total_bytes" not in row:
                row["mem_total_bytes"] = row["mem_used_bytes"] + f
    for series in out.values():
        name = series.labels.get("modelName") or series.labels.get("model_name") or ""
        series.simulated = series.simulated or "(simulated)" in name
    return out


def _points(points: list, metric: str, factor: float = 1.0) -> list[tuple[float, float]]:
    """(time, value) pairs, leaving out blanks, NaN, unparsable and implausible values."""
    out = []
    for p in points:
        try:
            t, v = float(p[0]), float(p[1])
        except (TypeError, ValueError, IndexError):
            continue
        if math.isfinite(t) and not is_blank(v) and plausible(metric, np.float64(v * factor)):
            out.append((t, v))
    return out


class PrometheusSource:
    """GPUs of every node a Prometheus server (``url``, e.g. "http://prometheus:9090") scrapes;
    ``timeout_s`` bounds one request (connect plus answer), ``max_bytes`` one answer (a bigger one
    is a failure); ``poll_s``: seconds between queries, None follows the scrape interval (≥ 1 s)."""

    kind = "prometheus"
    simulated = False

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_bytes: int = DEFAULT_MAX_BYTES, poll_s: float | None = None) -> None:
        try:
            parts = urllib.parse.urlsplit(str(url).strip())
            parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
        except ValueError as exc:
            raise BadArgumentError(f"Prometheus URL must look like http://HOST:9090, got {url!r} "
                                   f"({exc})") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise BadArgumentError(f"Prometheus URL must look like http://HOST:9090, got {url!r}")
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self.timeout_s, self.max_bytes, self.poll_s = float(timeout_s), int(max_bytes), poll_s
        self.state = "closed"
        self.last_error: str | None = None
        self.failures = 0
        self.resolution_s = math.nan
        self._devices: dict[str, Device] = {}
        self._metrics: dict[str, set[str]] = {}
        self._last_t: dict[str, float] = {}
        self._next_poll = 0.0
        self._last_query = math.nan

    # -- HTTP -------------------------------------------------------------------------------
    def query(self, promql: str, at: float) -> dict:
        """POST an instant query at ``at``; the decoded answer, or SourceError within ``timeout_s``."""
        form = {"query": promql, "timeout": f"{max(0.1, self.timeout_s - 0.2):.1f}", "time": f"{at:.3f}"}
        parts = urllib.parse.urlsplit(self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = kind(parts.netloc, timeout=self.timeout_s)
        deadline = time.monotonic() + self.timeout_s
        try:
            conn.connect()
            # The socket timeout bounds each read only: a timer shuts the connection at the deadline.
            timer = threading.Timer(max(0.0, deadline - time.monotonic()), _shut, (conn,))
            timer.daemon = True
            timer.start()
            try:
                conn.request("POST", parts.path + "/api/v1/query", urllib.parse.urlencode(form), HEADERS)
                resp = conn.getresponse()
                raw = resp.read(self.max_bytes + 1)  # to the end, or one byte past the limit
            finally:
                timer.cancel()
        except (OSError, http.client.HTTPException) as exc:
            if time.monotonic() >= deadline:
                raise self._slow() from exc
            raise SourceError(f"Prometheus at {self.url} is unreachable ({exc})") from exc
        finally:
            conn.close()
        if len(raw) > self.max_bytes:
            raise SourceError(f"Prometheus at {self.url} answered more than "
                              f"{self.max_bytes // 2**20} MiB; narrow what it scrapes")
        if time.monotonic() > deadline:
            raise self._slow()
        try:
            return json.loads(raw)  # Prometheus explains 4xx/5xx in JSON too
        except ValueError as exc:
            what = f"HTTP {resp.status}" if resp.status >= 400 else "something that is not JSON"
            raise SourceError(f"Prometheus at {self.url} answered {what}") from exc

    def _slow(self) -> SourceError:
        return SourceError(f"Prometheus at {self.url} answered too slowly (over {self.timeout_s:g} s)")

    def _fetch(self, window_s: float, at: float) -> dict[str, _Series]:
        ms = max(1000, int(window_s * 1000))
        return parse_matrix(self.query(f"{selector()}[{ms}ms]", at))

    # -- the source interface ------------------------------------------------------------------
    def open(self) -> None:
        """Find the GPUs Prometheus has seen lately; SourceError if it is unreachable or has none."""
        now = time.time()
        try:
            found = self._fetch(DISCOVER_WINDOW_S, now)
        except (SourceError, ValueError) as exc:
            raise SourceError(f"{exc}; check the URL and that Prometheus is running, "
                              "then try again") from exc
        latest = max((max(s.rows) for s in found.values() if s.rows), default=math.nan)
        recent = {k: s for k, s in found.items() if s.rows and max(s.rows) >= latest - 120}
        if not recent:
            raise SourceError(f"Prometheus at {self.url} has no recent GPU series (looked for "
                              "dcgm-exporter's DCGM_FI_* and nbgpu_gpu_*); check that it scrapes "
                              "dcgm-exporter or `nbgpu export`")
        gaps = [gap for s in recent.values() for gap in np.diff(sorted(s.rows))]  # between scrapes
        self.resolution_s = float(np.median(gaps)) if gaps else math.nan
        for key in sorted(recent, key=_natural):
            s = recent[key]
            self._metrics[key] = {m for row in s.rows.values() for m in row} & set(BY_NAME)
            self._devices[key] = self._describe_device(key, s)
            # Start just before the newest scrape so the panel has a value at once.
            self._last_t[key] = sorted(s.rows)[-2] if len(s.rows) > 1 else min(s.rows) - 1e-3
        self.simulated = all(d.simulated for d in self._devices.values())
        self.state, self._last_query = "ok", now

    def _describe_device(self, key: str, s: _Series) -> Device:
        last = s.rows[max(s.rows)]
        name = s.labels.get("modelName") or s.labels.get("model_name") or "unknown GPU"
        profile = s.labels.get("GPU_I_PROFILE")
        if profile and profile not in name:
            name = f"{name} MIG {profile}"
        mig = "/" in s.gpu
        total, limit = last.get("mem_total_bytes"), last.get("power_limit_w")
        return Device(
            key=key, name=name, uuid=s.labels.get("UUID") or s.labels.get("uuid", ""),
            parent=f"{s.host}/{s.gpu.split('/')[0]}" if mig else None, mig=mig,
            mem_total_bytes=None if total is None else int(total),
            power_limit_w=None if limit is None else float(limit),
            metrics=tuple(sorted(self._metrics.get(key, ()))), node=s.host, simulated=s.simulated)

    def close(self) -> None:
        self.state = "closed"

    def resolution_note(self) -> str | None:
        """How fine the readings are: Prometheus' scrape interval, in words."""
        every = self._every()
        return f"one reading per Prometheus scrape{every}" if every else None

    def _every(self) -> str:
        """", every 15 s": the scrape interval measured at open, two significant figures; "" if unknown."""
        return "" if math.isnan(self.resolution_s) else f", every {float(f'{self.resolution_s:.2g}'):g} s"

    def describe(self) -> str:
        hosts = {d.node for d in self._devices.values()}
        sim = " simulated" if self.simulated else ""
        return (f"{len(self._devices)}{sim} GPU(s) on {len(hosts)} host(s) from Prometheus at "
                f"{self.url}{self._every()}")

    def devices(self) -> list[Device]:
        return list(self._devices.values())

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]:
        return {key: {STREAM: {m: BY_NAME[m].dtype for m in sorted(self._metrics[key])}}
                for key in self._devices}

    def read(self, now: float, due: frozenset[str] = frozenset()) -> Reading:
        """Scrapes Prometheus stored since the last call; empty (never an exception) on failure."""
        reading = Reading()
        if self.state == "closed" or now < self._next_poll:
            return reading
        # Only what is new since the last answer, plus two scrapes of overlap.
        window = min(MAX_WINDOW_S, max(now - self._last_query, 0.0) + max(2 * self._res_s, 2.0))
        try:
            found = self._fetch(window, now)
        except Exception as exc:  # down, slow, garbage: remember, back off, carry on
            self._fail(now, exc, reading)
            return reading
        if self.state != "ok":
            reading.events.append(DeviceEvent(None, "recovered", f"Prometheus at {self.url} answers again"))
        self.state, self.last_error, self.failures = "ok", None, 0
        self._last_query = now
        self._next_poll = now + self._poll_every()
        for key, s in found.items():
            if key not in self._devices:
                continue
            times = np.array(sorted(t for t in s.rows if t > self._last_t[key]))
            if not len(times):
                continue
            cols = {m: np.array([s.rows[t].get(m, np.nan) for t in times]) for m in self._metrics[key]}
            reading.batches.append(Batch(key, STREAM, times, cols))
            self._last_t[key] = float(times[-1])
        return reading

    @property
    def _res_s(self) -> float:
        return 5.0 if math.isnan(self.resolution_s) else self.resolution_s

    def period_s(self, metric: str) -> float | None:
        """Seconds between new readings of any metric: a scrape, seen at the next query."""
        return max(self._res_s, self._poll_every())

    def _poll_every(self) -> float:
        return float(self.poll_s) if self.poll_s is not None else min(15.0, max(1.0, self._res_s / 2))

    def _fail(self, now: float, exc: BaseException, reading: Reading) -> None:
        self.failures += 1
        bad = not isinstance(exc, SourceError)
        message = f"bad answer from Prometheus at {self.url}: {exc}" if bad else str(exc)
        reading.errors.append(ReadError(None, "query", message))  # counted in status().errors
        if self.state != "unreachable":
            log.warning("source unreachable: %s", message)
            reading.events.append(DeviceEvent(None, "error", f"source unreachable: {message}"))
        self.state, self.last_error = "unreachable", message
        self._next_poll = now + min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** (self.failures - 1))


def _shut(conn: http.client.HTTPConnection) -> None:
    """Shut a connection's socket from another thread: a read blocked on it returns at once."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: closed meanwhile (no sock)
        conn.sock.shutdown(socket.SHUT_RDWR)


def _natural(key: str) -> tuple:
    host, _, gpu = key.partition("/")
    return (host, [int(p) if p.isdigit() else p for p in gpu.split("/")])

