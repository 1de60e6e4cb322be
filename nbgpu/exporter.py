"""Prometheus exporter: a sampler's newest GPU readings with dcgm-exporter's names, units and labels
where it has the metric, else ``nbgpu_gpu_*`` (NaN left out), all gauges, served by waitress."""

from __future__ import annotations

import contextlib
import logging
import math
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .errors import BadArgumentError, NbgpuError
from .sources.base import Device
from .sources.prometheus import FAMILIES, INFO_SERIES

if TYPE_CHECKING:
    from .sampler import Sampler

# dcgm-exporter's int64 fields: whole numbers in its units (framebuffer MiB truncated, the rest rounded).
WHOLE = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_GPU_TEMP",
                   "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_ENC_UTIL",
                   "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                   "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_FB_USED"})
_PROFILE = re.compile(r"\b\d+g\.\d+gb\b")  # a MIG profile in a slice's name, e.g. 2g.35gb


def device_labels(device: Device, hostname: str, model_label: str = "model_name") -> dict[str, str]:
    """dcgm-exporter's labels for one device (MIG slices add ``GPU_I_ID``, ``GPU_I_PROFILE``)."""
    labels = {"gpu": str(device.card), "UUID": device.uuid, "device": f"nvidia{device.card}",
              model_label: device.name, "Hostname": hostname}
    if device.parent is not None:
        labels["GPU_I_ID"] = str(device.key).rsplit("/", 1)[-1]
        if profile := _PROFILE.search(device.name):
            labels["GPU_I_PROFILE"] = profile.group(0)
    return labels


def families(rows: list[tuple[Device, dict]], hostname: str | None = None,
             model_label: str = "model_name", simulated: bool = False) -> list[Metric]:
    """Metric families for ``(device, {metric: value})`` pairs; NaN and None values are left out."""
    host = hostname or socket.gethostname()
    labelled = [(device_labels(d, host, model_label), values) for d, values in rows]
    out: list[Metric] = []
    for fam in FAMILIES:
        metric = GaugeMetricFamily(fam.name, fam.help)
        for labels, values in labelled:
            if (v := values.get(fam.metric)) is None or v != v:
                continue
            v = float(v) * fam.scale
            if fam.name in WHOLE:
                v = float(math.floor(v) if fam.name == "DCGM_FI_DEV_FB_USED" else round(v))
            metric.add_sample(fam.name, labels, v)
        if metric.samples:
            out.append(metric)
    if labelled:
        info = GaugeMetricFamily(INFO_SERIES, "Devices nbgpu exports (value is always 1).")
        extra = {"driver_version": "", "simulated": "true" if simulated else "false"}
        for labels, _values in labelled:
            info.add_sample(INFO_SERIES, {**labels, **extra}, 1.0)
        out.append(info)
    return out


class GpuCollector:
    """prometheus-client collector of a sampler's newest readings, one snapshot per scrape
    (``hostname``: None is this machine's name; ``model_label``: or dcgm's "modelName")."""

    def __init__(self, sampler: Sampler, hostname: str | None = None,
                 model_label: str = "model_name") -> None:
        self.sampler, self.hostname, self.model_label = sampler, hostname, model_label

    def collect(self) -> Iterator[Metric]:
        """The newest reading of every GPU read and not lost, then the sampler's tick and error counters."""
        s = self.sampler
        s.watch()  # a scrape is someone looking: keep the newest utilisation fresh
        by_key = {d.key: d for d in s.devices}
        rows = [(by_key[row["gpu"]], row) for row in s.latest()
                if row.get("state") != "lost" and row["gpu"] in by_key
                and row.get("time_s", 0.0) == row.get("time_s", 0.0)]  # NaN: never read
        status = s.status()
        yield from families(rows, self.hostname, self.model_label, simulated=status.simulated)
        for name, what, value in (("ticks", "Sampler ticks since it started.", status.ticks),
                                  ("errors", "Sampler reads that failed since it started.", status.errors)):
            yield CounterMetricFamily(f"nbgpu_sampler_{name}", what, value=float(value))


def registry_for(sampler: Sampler, hostname: str | None = None,
                 model_label: str = "model_name") -> CollectorRegistry:
    """A registry holding only ``sampler``'s collector (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(sampler, hostname, model_label))
    return registry


def prometheus_text(sampler: Sampler, hostname: str | None = None,
                    model_label: str = "model_name") -> str:
    """The sampler's newest reading of every live GPU as Prometheus exposition text."""
    return generate_latest(registry_for(sampler, hostname, model_label)).decode()


def _app(registry: CollectorRegistry) -> Callable:
    """A WSGI app: ``/metrics`` (GET or HEAD) from ``registry``, 404 elsewhere."""
    prometheus = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != "/metrics":
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found; the metrics are at /metrics\n"]
        if environ["REQUEST_METHOD"] == "HEAD":  # prometheus-client answers GET; waitress drops the body
            environ = {**environ, "REQUEST_METHOD": "GET"}
        return prometheus(environ, start_response)  # 405 for other methods; waitress answers 500 on errors

    return app


class Exporter(contextlib.AbstractContextManager):
    """A running exporter of ``registry``: ``url`` to scrape, ``close()`` to stop (a context manager).
    ``port`` 0 picks a free one; ``timeout_s`` closes idle connections; ``request_deadline_s``
    drops a request that trickles in slower."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 9464,
                 timeout_s: int = 5, request_deadline_s: float = 3.0) -> None:
        from waitress.server import create_server

        self._map: dict = {}
        try:
            self._server = create_server(
                # Two workers: a scrape is answered from memory in about a millisecond.
                _app(registry), map=self._map, host=host, port=port, threads=2,
                backlog=1024, connection_limit=64, channel_timeout=int(timeout_s),
                cleanup_interval=1, ident="nbgpu", asyncore_use_poll=True, expose_tracebacks=False)
        except ValueError:  # waitress: "Invalid host/port specified."
            raise BadArgumentError(f"--host {host!r} / --port {port!r} is not an address to listen on; "
                                   "give an IP address or host name, e.g. --host 127.0.0.1") from None
        except OSError as exc:
            raise NbgpuError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                             "choose another --port or stop what uses it") from exc
        install_queue_filter()
        _drop_slow_requests(self._server, float(request_deadline_s))
        self.host, self.port = host, int(self._server.effective_port)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nbgpu-exporter", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        from waitress import wasyncore

        try:
            while not self._stop.is_set():
                wasyncore.loop(timeout=0.5, map=self._map, use_poll=True, count=1)
        finally:
            self._server.task_dispatcher.shutdown()
            wasyncore.close_all(self._map)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port; safe to call again, or after the loop has ended."""
        self._stop.set()
        if self._thread.is_alive():
            with contextlib.suppress(OSError):  # it may have ended and closed its trigger meanwhile
                self._server.pull_trigger()  # wake the loop so it sees the stop at once
        self._thread.join(timeout=5)

    def __exit__(self, *exc: object) -> None:
        self.close()


def install_queue_filter(quiet_s: float = 60.0) -> None:
    """Let waitress's "Task queue depth" warning through once per episode (``quiet_s`` without one),
    replacing the filter an earlier call put on the ``waitress.queue`` logger."""
    logger, last = logging.getLogger("waitress.queue"), [-math.inf]

    def queue_depth_once(record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Task queue depth"):
            return True
        before, last[0] = last[0], time.monotonic()
        return last[0] - before > quiet_s

    for old in [f for f in logger.filters if getattr(f, "__name__", "") == queue_depth_once.__name__]:
        logger.removeFilter(old)
    logger.addFilter(queue_depth_once)


def _drop_slow_requests(server, deadline_s: float) -> None:
    """Make ``server``'s cleanup also close channels whose request is unfinished ``deadline_s`` in."""
    idle_check = server.maintenance

    def maintenance(now: float) -> None:
        idle_check(now)
        for channel in list(server.active_channels.values()):
            request = getattr(channel, "request", None)
            if request is None or channel.requests:
                continue
            first = request.__dict__.setdefault("nbgpu_first_seen_s", now)  # waitress's request parser
            if now - first > deadline_s:
                channel.will_close = True

    server.maintenance = maintenance


def serve(sampler: Sampler, host: str = "127.0.0.1", port: int = 9464, hostname: str | None = None,
          model_label: str = "model_name", timeout_s: int = 5) -> Exporter:
    """Serve ``sampler``'s newest readings at ``http://host:port/metrics`` from a thread."""
    return Exporter(registry_for(sampler, hostname, model_label), host, port, timeout_s)
