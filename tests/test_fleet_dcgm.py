"""A dcgm-exporter fleet of two nodes, scraped by a real Prometheus, read into nbgpu and its panel.

The node texts (``tests/data/dcgm/``) are what dcgm-exporter serves; each is served over
HTTP on 127.0.0.1 by the test, and can be switched to failing to stand for a node that
stops answering. Expected figures are computed here from the text with dcgm-exporter's
documented units (MiB, W, mJ, ratios), independently of nbgpu's name table.
"""

from __future__ import annotations

import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest_cli import SCRAPE_S, PrometheusServer, free_port, prometheus_binary
from conftest_panel import kernel_session, show_in_kernel
from nbgpu import Sampler
from nbgpu.errors import SourceError

pytestmark = pytest.mark.prometheus
DATA = Path(__file__).parent / "data" / "dcgm"
NODES = ("gpu-node-a", "gpu-node-b")
MIB = 2**20
# dcgm-exporter series -> (nbgpu metric, factor from the series' documented unit)
DOCUMENTED = {"DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1.0), "DCGM_FI_DEV_FB_USED": ("mem_used_bytes", MIB),
              "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0), "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0),
              "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0),
              "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3),
              "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor_active_pct", 100.0)}


def expected(node: str) -> dict[str, dict[str, float]]:
    """{device key: {metric: value}} from a node's text, in nbgpu's units."""
    out: dict[str, dict[str, float]] = {}
    free: dict[str, float] = {}
    for fam in text_string_to_metric_families((DATA / f"{node}.prom").read_text()):
        for sample in fam.samples:
            lab = sample.labels
            key = f"{lab['Hostname']}/{lab['gpu']}" + (f"/{lab['GPU_I_ID']}" if "GPU_I_ID" in lab else "")
            if sample.name in DOCUMENTED:
                metric, factor = DOCUMENTED[sample.name]
                out.setdefault(key, {})[metric] = sample.value * factor
            elif sample.name == "DCGM_FI_DEV_FB_FREE":
                free[key] = sample.value * MIB
    for key, f in free.items():
        out[key]["mem_total_bytes"] = out[key]["mem_used_bytes"] + f
    return out


class DcgmNode:
    """One node's dcgm-exporter text at /metrics; ``down = True`` makes every scrape fail."""

    def __init__(self, node: str) -> None:
        body = (DATA / f"{node}.prom").read_bytes()
        outer = self
        self.down = False

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, data = (503, b"down\n") if outer.down else (200, body)
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    prometheus_binary()
    nodes = {n: DcgmNode(n) for n in NODES}
    server = None
    try:
        server = PrometheusServer({"dcgm": [f"127.0.0.1:{n.port}" for n in nodes.values()]},
                                  str(tmp_path_factory.mktemp("prometheus")))
        server.wait_for("DCGM_FI_DEV_FB_USED", 5)
        time.sleep(3 * SCRAPE_S)  # a few scrapes of history
        yield server, nodes
    finally:
        if server is not None:
            server.close()
        for n in nodes.values():
            n.close()


def wait_until(check, timeout_s: float, what: str):
    """Poll ``check()`` (it reads a real Prometheus) until it is truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.2)


def test_every_node_card_and_slice_reads_as_dcgm_served_it(fleet):
    server, _ = fleet
    want = {**expected("gpu-node-a"), **expected("gpu-node-b")}
    with Sampler(f"prometheus={server.url}", interval=0.5, host=False) as s:
        devices = {d.key: d for d in s.devices}
        assert list(devices) == sorted(want, key=lambda k: (k.split("/")[0], k))  # grouped by node
        assert {d.node for d in s.devices} == set(NODES)
        slice_ = devices["gpu-node-b/0/1"]
        assert slice_.mig and slice_.parent == "gpu-node-b/0" and "3g.40gb" in slice_.name
        assert "util_pct" not in slice_.metrics  # dcgm-exporter reports none for a MIG slice
        assert devices["gpu-node-a/1"].mem_total_bytes == want["gpu-node-a/1"]["mem_total_bytes"]
        note = s.status().resolution_note
        assert note and f"every {SCRAPE_S:g} s" in note
        rows = wait_until(lambda: {r["gpu"]: r for r in s.latest()
                                   if all(r["states"].get(m) == "live" for m in want[r["gpu"]])},
                          15, "every metric of every device live")
        assert set(rows) == set(want)
        for key, metrics in want.items():
            for metric, value in metrics.items():
                assert rows[key][metric] == pytest.approx(value, rel=1e-6), (key, metric)


def test_a_node_that_stops_answering_goes_stale_not_zero(fleet):
    server, nodes = fleet
    with Sampler(f"prometheus={server.url}", interval=0.5, host=False) as s:
        wait_until(lambda: all(r["states"].get("mem_used_bytes") == "live" for r in s.latest()), 15,
                   "memory of every device live")
        nodes["gpu-node-b"].down = True
        try:
            rows = wait_until(
                lambda: (lambda rs: rs if all(r["states"]["mem_used_bytes"] != "live" for r in rs
                                              if r["gpu"].startswith("gpu-node-b/")) else None)(s.latest()),
                45 * SCRAPE_S, "gpu-node-b stale")  # generous: a loaded CI box scrapes late
        finally:
            nodes["gpu-node-b"].down = False
        for r in rows:
            if r["gpu"].startswith("gpu-node-b/"):
                assert r["states"]["mem_used_bytes"] == "stale", r["states"]
                assert math.isnan(r["mem_used_bytes"])  # not 0, not the frozen value
                assert r["last_good"]["mem_used_bytes"] > 0
            else:
                assert r["states"]["mem_used_bytes"] == "live", r["gpu"]
                assert r["mem_used_bytes"] > 0


def test_prometheus_down_is_one_clear_line_quickly():
    url = f"http://127.0.0.1:{free_port()}"
    t0 = time.monotonic()
    with pytest.raises(SourceError) as err:
        Sampler(f"prometheus={url}", host=False)
    assert time.monotonic() - t0 < 5
    assert "\n" not in str(err.value) and url in str(err.value) and "unreachable" in str(err.value)


PANEL_TEXT = """(lambda w: [c.value for c in w.widgets.values() if type(c).__name__ == 'HTML'])(
    __import__('ipywidgets').Widget)"""


@pytest.mark.kernel
def test_the_panel_shows_every_node_with_the_resolution_and_prometheus_down_does_not_block(fleet):
    server, _ = fleet
    with kernel_session() as k:
        assert k.run("%load_ext nbgpu")["status"] == "ok"
        t0 = time.monotonic()
        reply = k.run(f"%gpumon --source prometheus=http://127.0.0.1:{free_port()}", timeout=30)
        assert time.monotonic() - t0 < 10, "an unreachable Prometheus must not block the kernel"
        said = reply.get("evalue", "") if reply["status"] == "error" else k.stdout_since(0)
        assert "unreachable" in said and "\n" not in said.strip(), said
        assert k.run(f"%gpumon --source prometheus={server.url}")["status"] == "ok"
        show_in_kernel(k)  # a front end's view of it is on screen
        k.drain(3)
        html = " ".join(k.value(PANEL_TEXT))
        keys = sorted(k2 for node in NODES for k2 in expected(node))
        at = [html.find(f"GPU {key}<") for key in keys]
        assert all(i >= 0 for i in at), [key for key, i in zip(keys, at, strict=True) if i < 0]
        assert at == sorted(at), "rows are grouped by node, in order"
        assert f"every {SCRAPE_S:g} s" in html  # the source's resolution in the header
        assert k.run("%gpumon stop")["status"] == "ok"
