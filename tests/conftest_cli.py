"""Fixtures of the cli area: exporters serving simulated GPUs and a real Prometheus scraping them.

Import explicitly (``from conftest_cli import ...``). Prometheus is Debian's ``prometheus``
binary, started on 127.0.0.1 with a temporary config and data directory and stopped after.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.exporter import Exporter, GpuCollector

SCRAPE_S = 1.0


def to_text(metrics: list) -> str:
    """Exposition text of metric families, written by prometheus-client."""
    return generate_latest(SimpleNamespace(collect=lambda: metrics)).decode()


def prometheus_binary() -> str:
    """Path of the prometheus binary; skip when absent outside CI, fail in CI."""
    path = shutil.which("prometheus")
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the prometheus binary is required in CI (apt-get install prometheus)")
        pytest.skip("prometheus is not installed")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecordingExporter:
    """An nbgpu exporter over a simulated node that remembers every text it served."""

    def __init__(self, hostname: str, seed: int, count: int = 2) -> None:
        self.hostname = hostname
        self.sampler = Sampler(SimulatedGPUs(count=count, seed=seed), interval=0.2, host=False).start()
        self.served: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        self.exporter = Exporter(registry, "127.0.0.1", 0)

    def collect(self) -> list:
        """What the exporter serves, remembered as text (a prometheus-client collector)."""
        metrics = list(GpuCollector(self.sampler, self.hostname).collect())
        with self._lock:
            self.served.append((time.time(), to_text(metrics)))
        return metrics

    def close(self) -> None:
        self.exporter.close()
        self.sampler.stop()


class StaticText:
    """Serves one fixed exposition text at /metrics (stands in for a dcgm-exporter)."""

    def __init__(self, text: str) -> None:
        body = text.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PrometheusServer:
    """A real Prometheus on 127.0.0.1 scraping ``targets`` every SCRAPE_S seconds."""

    def __init__(self, targets: dict[str, list[str]], tmp: str) -> None:
        binary = prometheus_binary()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        jobs = "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: {json.dumps(t)}\n"
            for job, t in targets.items())
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as fh:
            fh.write(f"global:\n  scrape_interval: {SCRAPE_S:g}s\n  scrape_timeout: {SCRAPE_S:g}s\n"
                     f"scrape_configs:\n{jobs}")
        self.log = open(os.path.join(tmp, "prometheus.log"), "w")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [binary, f"--config.file={config}", f"--storage.tsdb.path={os.path.join(tmp, 'data')}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.wait_ready()

    def wait_ready(self, timeout_s: float = 30) -> None:
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("prometheus did not become ready")

    def query(self, promql: str) -> list:
        data = urllib.parse.urlencode({"query": promql}).encode()
        with urllib.request.urlopen(self.url + "/api/v1/query", data=data, timeout=5) as r:
            return json.load(r)["data"]["result"]

    def wait_for(self, promql: str, count: int, timeout_s: float = 30) -> None:
        """Wait until ``promql`` returns at least ``count`` series."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if len(self.query(promql)) >= count:
                return
            time.sleep(0.3)
        raise RuntimeError(f"prometheus never had {count} series for {promql}")

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# dcgm-exporter output as its documentation describes it: HELP/TYPE lines, labels gpu,
# UUID, device, modelName, Hostname. Node "dcgm-old" uses old names (1.x names, the
# pre-DCGM-4 throttle field) and a lowercase ``hostname``; node "dcgm-new" the new names and
# a blank (DCGM_FP64_BLANK / DCGM_INT32_BLANK) where a value is unavailable.
A0 = 'gpu="0",UUID="GPU-aaaa",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="dcgm-new"'
A1 = 'gpu="1",UUID="GPU-bbbb",device="nvidia1",modelName="NVIDIA A100-SXM4-80GB",Hostname="dcgm-new"'
OLD = 'gpu="0",UUID="GPU-cccc",device="nvidia0",modelName="Tesla V100-SXM2-32GB",hostname="dcgm-old"'
DCGM_TEXT = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{A0}} 87
DCGM_FI_DEV_GPU_UTIL{{A1}} 2147483632
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{A0}} 40960
DCGM_FI_DEV_FB_USED{{A1}} 1024
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{{A0}} 40000
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{A0}} 312.5
DCGM_FI_DEV_POWER_USAGE{{A1}} 140737488355328
# HELP DCGM_FI_DEV_CLOCKS_EVENT_REASONS Current clock event reasons (bitmask).
# TYPE DCGM_FI_DEV_CLOCKS_EVENT_REASONS gauge
DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{A0}} 4
# HELP DCGM_FI_PROF_SM_ACTIVE Ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{{A0}} 0.75
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{A0}} 123456789
# HELP DCGM_FI_DEV_CLOCK_THROTTLE_REASONS Current clock throttle reasons.
# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{{OLD}} 64
# HELP dcgm_gpu_utilization GPU utilization (in %).
# TYPE dcgm_gpu_utilization gauge
dcgm_gpu_utilization{gpu="0",uuid="GPU-cccc",hostname="dcgm-old"} 55
# HELP dcgm_fb_used Framebuffer memory used (in MiB).
# TYPE dcgm_fb_used gauge
dcgm_fb_used{gpu="0",uuid="GPU-cccc",hostname="dcgm-old"} 2048
# HELP dcgm_gpu_temp GPU temperature (in C).
# TYPE dcgm_gpu_temp gauge
dcgm_gpu_temp{gpu="0",uuid="GPU-cccc",hostname="dcgm-old"} 71
""".replace("{A0}", A0).replace("{A1}", A1).replace("{OLD}", OLD)


@pytest.fixture(scope="module")
def prometheus_cluster(tmp_path_factory) -> Iterator[tuple[PrometheusServer, dict[str, RecordingExporter]]]:
    """Prometheus scraping two nbgpu nodes ("node-a", "node-b") and one dcgm-exporter text."""
    prometheus_binary()
    nodes = {"node-a": RecordingExporter("node-a", seed=1), "node-b": RecordingExporter("node-b", seed=2)}
    dcgm = StaticText(DCGM_TEXT)
    server = None
    try:
        targets = {"nbgpu": [f"127.0.0.1:{n.exporter.port}" for n in nodes.values()],
                   "dcgm": [f"127.0.0.1:{dcgm.port}"]}
        server = PrometheusServer(targets, str(tmp_path_factory.mktemp("prometheus")))
        server.wait_for("DCGM_FI_DEV_GPU_UTIL", 6)
        server.wait_for("dcgm_gpu_utilization", 1)
        time.sleep(3 * SCRAPE_S)  # a few scrapes of history
        yield server, nodes
    finally:
        if server is not None:
            server.close()
        dcgm.close()
        for n in nodes.values():
            n.close()


class CraftedPrometheus:
    """A Prometheus API peer that answers every query with the same crafted series, stamped
    at the last 4 seconds; ``series`` is [(labels, values)]."""

    def __init__(self, series) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                now = time.time()
                result = [{"metric": labels, "values": [[now - 3 + i, str(v)] for i, v in enumerate(values)]}
                          for labels, values in outer.series]
                body = json.dumps({"status": "success",
                                   "data": {"resultType": "matrix", "result": result}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.series = series
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
