"""The HTTP side of the exporter: prometheus-client's WSGI app served by waitress (a fixed worker
pool, idle connections closed, a real backlog, HEAD answered); binds 127.0.0.1 unless told."""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, make_wsgi_app

from ..errors import BadArgumentError, NbgpuError
from .text import registry_for

if TYPE_CHECKING:
    from ..sampler import Sampler

log = logging.getLogger("nbgpu")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464
DEFAULT_TIMEOUT_S = 5  # an idle or slow-header connection is closed after this
REQUEST_DEADLINE_S = 3.0  # a request must arrive whole within this, however it trickles

_Start = Callable[[str, list], object]


def metrics_app(registry: CollectorRegistry) -> Callable[[dict, _Start], Iterable[bytes]]:
    """A WSGI app: ``/metrics`` (GET or HEAD) from ``registry``, a link at ``/``, 404 elsewhere."""
    prometheus = make_wsgi_app(registry)

    def app(environ: dict, start_response: _Start) -> Iterable[bytes]:
        method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/")
        if method not in ("GET", "HEAD"):
            return _plain(start_response, "405 Method Not Allowed", b"only GET and HEAD are served\n",
                          [("Allow", "GET, HEAD")])
        if path == "/metrics":
            try:  # prometheus-client answers GET only; waitress drops the body of a HEAD
                return prometheus({**environ, "REQUEST_METHOD": "GET"}, start_response)
            except Exception as exc:  # a broken reading must not take the server down
                log.debug("exporter scrape failed", exc_info=True)
                return _plain(start_response, "500 Internal Server Error",
                              f"nbgpu exporter failed: {exc}\n".encode())
        if path == "/":
            body = b'<html><body><a href="/metrics">nbgpu metrics</a></body></html>\n'
            return _plain(start_response, "200 OK", body, ctype="text/html; charset=utf-8")
        return _plain(start_response, "404 Not Found", b"not found; the metrics are at /metrics\n")

    return app


def _plain(start_response: _Start, status: str, body: bytes, extra: list | None = None,
           ctype: str = "text/plain; charset=utf-8") -> list[bytes]:
    start_response(status, [("Content-Type", ctype), ("Content-Length", str(len(body))), *(extra or [])])
    return [body]


class Exporter:
    """A running exporter of ``registry``: ``url`` to scrape, ``close()`` to stop (a context manager).
    ``port`` 0 picks a free one; ``timeout_s`` closes idle connections; ``request_deadline_s``
    drops a request that trickles in slower."""

    def __init__(self, registry: CollectorRegistry, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT, timeout_s: int = DEFAULT_TIMEOUT_S,
                 request_deadline_s: float = REQUEST_DEADLINE_S) -> None:
        from waitress.server import create_server

        self._map: dict = {}
        try:
            self._server = create_server(
                # Two workers: a scrape is answered from memory in about a millisecond.
                metrics_app(registry), map=self._map, host=host, port=port, threads=2,
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

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class QueueDepthOnce(logging.Filter):
    """Lets waitress's "Task queue depth" warning through once per episode (``quiet_s`` without one)."""

    def __init__(self, quiet_s: float = 60.0) -> None:
        super().__init__()
        self.quiet_s, self._last, self._lock = quiet_s, -math.inf, threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Task queue depth"):
            return True
        with self._lock:
            now, last = time.monotonic(), self._last
            self._last = now
        return now - last > self.quiet_s


def install_queue_filter(quiet_s: float = 60.0) -> QueueDepthOnce:
    """Put one ``QueueDepthOnce`` on the ``waitress.queue`` logger (replacing an earlier one)."""
    logger = logging.getLogger("waitress.queue")
    for old in [f for f in logger.filters if isinstance(f, QueueDepthOnce)]:
        logger.removeFilter(old)
    logger.addFilter(flt := QueueDepthOnce(quiet_s))
    return flt


def _drop_slow_requests(server, deadline_s: float) -> None:
    """Make ``server``'s cleanup also close channels whose request is unfinished ``deadline_s`` in."""
    idle_check = server.maintenance
    started: dict[int, tuple[object, float]] = {}

    def maintenance(now: float) -> None:
        idle_check(now)
        waiting = {fd: channel for fd, channel in list(server.active_channels.items())
                   if getattr(channel, "request", None) is not None and not channel.requests}
        for fd in set(started) - set(waiting):
            del started[fd]
        for fd, channel in waiting.items():
            first = started.get(fd)
            if first is None or first[0] is not channel.request:
                started[fd] = (channel.request, now)
            elif now - first[1] > deadline_s:
                channel.will_close = True

    server.maintenance = maintenance


def serve(sampler: Sampler, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          hostname: str | None = None, model_label: str = "model_name",
          timeout_s: int = DEFAULT_TIMEOUT_S) -> Exporter:
    """Serve ``sampler``'s newest readings at ``http://host:port/metrics`` from a thread."""
    return Exporter(registry_for(sampler, hostname, model_label), host, port, timeout_s)
