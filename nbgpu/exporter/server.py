"""A small HTTP server that answers Prometheus scrapes with a sampler's current readings.

Standard library only (``http.server.ThreadingHTTPServer``): one route, ``/metrics``, and
nothing else to configure, so no extra dependency is worth it. Binds 127.0.0.1 unless
told otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from ..errors import NbgpuError
from .text import CONTENT_TYPE, prometheus_text

if TYPE_CHECKING:
    from ..sampler import Sampler

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9464


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            try:
                body, status, ctype = self.server.render().encode(), 200, CONTENT_TYPE
            except Exception as exc:  # a broken reading must not kill the server
                body, status, ctype = f"nbgpu exporter failed: {exc}\n".encode(), 500, "text/plain"
        elif path == "/":
            body = b"<html><body><a href=\"/metrics\">nbgpu metrics</a></body></html>\n"
            status, ctype = 200, "text/html; charset=utf-8"
        else:
            body, status, ctype = b"not found; the metrics are at /metrics\n", 404, "text/plain"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Stay quiet: a scrape every few seconds would flood the terminal."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    render: Callable[[], str]


class Exporter:
    """A running exporter: ``url`` to scrape, ``close()`` to stop it (also a context manager).

    Args:
        render: returns the exposition text for each scrape (see ``serve``).
        host: address to bind; 127.0.0.1 keeps it on this machine.
        port: TCP port; 0 picks a free one (see ``port``/``url`` afterwards).
    """

    def __init__(self, render: Callable[[], str], host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT) -> None:
        try:
            self._server = _Server((host, port), _Handler)
        except OSError as exc:
            raise NbgpuError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); "
                             "choose another --port or stop what uses it") from exc
        self._server.render = render
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="nbgpu-exporter", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(sampler: Sampler, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT,
          hostname: str | None = None, model_label: str = "model_name") -> Exporter:
    """Serve ``sampler``'s current readings at ``http://host:port/metrics`` from a thread."""
    return Exporter(lambda: prometheus_text(sampler, hostname, model_label), host, port)
