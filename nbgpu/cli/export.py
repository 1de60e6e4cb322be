"""``nbgpu export``: serve the GPUs' current readings to Prometheus until interrupted."""

from __future__ import annotations

import signal
import sys
import threading

from ..exporter import serve
from ..sampler import Sampler


def run_export(source: str, interval: float, host: str, port: int, hostname: str | None = None,
               stop: threading.Event | None = None) -> int:
    """Sample ``source`` and serve it at http://host:port/metrics until Ctrl-C, SIGTERM or ``stop``."""
    stop = stop or threading.Event()
    sampler = Sampler(source, interval=interval, host=False).start()
    try:
        exporter = serve(sampler, host, port, hostname)
    except Exception:
        sampler.stop()
        raise
    label = " (SIMULATED)" if sampler.simulated else ""
    print(f"nbgpu export: serving {len(sampler.devices)} GPU(s){label} at {exporter.url}", file=sys.stderr,
          flush=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"nbgpu export: listening on {host}: other machines can read these metrics", file=sys.stderr,
              flush=True)
    in_main = threading.current_thread() is threading.main_thread()  # signals can be caught only there
    old = {s: signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM) if in_main}
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        exporter.close()
        sampler.stop()
    return 0
