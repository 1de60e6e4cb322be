"""PrometheusSource: parsing API answers, surviving a bad server, and a real Prometheus."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest

from conftest_cli import SCRAPE_S, prometheus_cluster  # noqa: F401 - fixture
from nbgpu import Sampler
from nbgpu.errors import BadArgumentError, SourceError
from nbgpu.sources import resolve_source
from nbgpu.sources.prometheus import PrometheusSource, is_blank, parse_matrix


def answer(*series: tuple[dict, list]) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[t, str(v)] for t, v in points]} for labels, points in series]}}


def test_old_and_new_names_host_labels_and_blanks():
    new = {"gpu": "0", "UUID": "GPU-a", "modelName": "A100", "Hostname": "n1"}
    old = {"gpu": "1", "uuid": "GPU-b", "hostname": "n2"}
    found = parse_matrix(answer(
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", **new}, [(10, 87), (11, 2147483632)]),
        ({"__name__": "DCGM_FI_DEV_FB_USED", **new}, [(10, 1024)]),
        ({"__name__": "DCGM_FI_DEV_FB_FREE", **new}, [(10, 3072)]),
        ({"__name__": "DCGM_FI_DEV_POWER_USAGE", **new}, [(10, 140737488355328.0)]),
        ({"__name__": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", **new}, [(10, 4)]),
        ({"__name__": "DCGM_FI_PROF_SM_ACTIVE", **new}, [(10, 0.5)]),
        ({"__name__": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", **new}, [(10, 2500)]),
        ({"__name__": "dcgm_gpu_utilization", **old}, [(10, 55)]),
        ({"__name__": "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", **old}, [(10, 64)]),
        ({"__name__": "dcgm_fb_used", **old}, [(10, 2048)]),
        ({"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "n1", "GPU_I_ID": "3"}, [(10, 40)]),
        ({"__name__": "up", "instance": "x"}, [(10, 1)]),
    ))
    assert set(found) == {"n1/0", "n2/1", "n1/0/3"}
    a, b = found["n1/0"], found["n2/1"]
    assert a.host == "n1" and b.host == "n2"
    assert a.rows[10.0] == {"util_pct": 87.0, "mem_used_bytes": 1024 * 2**20, "mem_total_bytes": 4096 * 2**20,
                            "clock_event_reasons": 4.0, "sm_active_pct": 50.0, "energy_j": 2.5}
    assert 11.0 not in a.rows  # the blank utilisation is missing, not a number
    assert b.rows[10.0] == {"util_pct": 55.0, "clock_event_reasons": 64.0, "mem_used_bytes": 2048 * 2**20}


def test_the_better_name_wins_when_both_are_present():
    lab = {"gpu": "0", "Hostname": "n"}
    found = parse_matrix(answer(({"__name__": "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", **lab}, [(1, 2)]),
                                ({"__name__": "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", **lab}, [(1, 8)])))
    assert found["n/0"].rows[1.0]["clock_event_reasons"] == 8  # the name nbgpu itself exports


def test_blank_sentinels():
    for v in (2147483632, 2147483633, 2147483647, 9223372036854775792, 140737488355328.0,
              140737488355329.0, float("nan")):
        assert is_blank(float(v)), v
    for v in (0, 1, 700, 2147483631, 1e12):
        assert not is_blank(float(v)), v


@pytest.mark.parametrize("payload", [b"not json", b"[]", b'{"status": "error", "error": "bad query"}',
                                     b'{"status": "success", "data": {"resultType": "scalar"}}'])
def test_garbage_answers_are_rejected(payload):
    with pytest.raises(ValueError):
        parse_matrix(json.loads(payload) if payload.startswith((b"[", b"{")) else payload)


def test_bad_url_is_a_usage_error():
    with pytest.raises(BadArgumentError):
        PrometheusSource("localhost:9090")
    assert isinstance(resolve_source("prometheus=http://127.0.0.1:1"), PrometheusSource)


class BadServer:
    """A fake Prometheus whose behaviour the test switches: good, garbage, slow, huge, 500."""

    def __init__(self) -> None:
        self.mode = "good"
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                now = time.time()
                good = json.dumps(answer(({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "h"},
                                          [(now - 2, 10), (now - 1, 20)]))).encode()
                body = {"good": good, "garbage": b"<html>proxy error</html>", "huge": b"[" + b" " * 3_000_000,
                        "slow": good, "error": b"oops"}[outer.mode]
                if outer.mode == "slow":
                    time.sleep(3)
                self.send_response(500 if outer.mode == "error" else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def bad_server():
    s = BadServer()
    yield s
    s.close()


def test_down_slow_or_garbage_never_raises_or_blocks(bad_server):
    src = PrometheusSource(bad_server.url, timeout_s=1.0, max_bytes=1_000_000, poll_s=0.0)
    src.open()
    assert src.state == "ok" and [d.key for d in src.devices()] == ["h/0"]
    now = time.time()
    for mode in ("garbage", "huge", "slow", "error"):
        bad_server.mode = mode
        src._next_poll = 0.0
        t0 = time.monotonic()
        reading = src.read(now)
        assert time.monotonic() - t0 < 1.8, mode  # bounded by timeout_s
        assert reading.batches == []
        assert src.state == "unreachable" and src.last_error, mode
    assert src.failures == 4
    # Backoff: the next attempt waits, doubling per failure, and a call meanwhile asks nothing.
    before = bad_server.requests
    assert src._next_poll - now == pytest.approx(8.0)
    src.read(now + 1)
    assert bad_server.requests == before
    bad_server.mode = "good"
    reading = src.read(now + 8.5)
    assert src.state == "ok" and src.last_error is None and src.failures == 0
    assert any(ev.kind == "recovered" for ev in reading.events)


def test_unreachable_at_open_is_one_clear_error():
    src = PrometheusSource("http://127.0.0.1:9", timeout_s=1.0)
    t0 = time.monotonic()
    with pytest.raises(SourceError, match=r"unreachable.*check the URL"):
        src.open()
    assert time.monotonic() - t0 < 2


def _served_values(node, gpu: str, metric_series: str) -> list[tuple[float, float]]:
    """(time, value) of one series in every text this exporter served."""
    pattern = re.compile(rf'^{metric_series}{{[^}}]*\bgpu="{gpu}"[^}}]*}} (\S+)$', re.M)
    out = []
    for t, text in node.served:
        m = pattern.search(text)
        if m:
            out.append((t, float(m.group(1))))
    return out


@pytest.mark.prometheus
def test_two_nodes_read_back_through_a_real_prometheus(prometheus_cluster):  # noqa: F811
    server, nodes = prometheus_cluster
    src = PrometheusSource(server.url)
    src.open()
    keys = [d.key for d in src.devices()]
    assert {"node-a/0", "node-a/1", "node-b/0", "node-b/1"} <= set(keys)
    by_key = {d.key: d for d in src.devices()}
    assert by_key["node-a/1"].node == "node-a" and by_key["node-a/1"].parent is None
    assert by_key["node-a/0"].simulated is True
    assert src.resolution_s == pytest.approx(SCRAPE_S, rel=0.2)
    assert f"every {float(f'{src.resolution_s:.2g}'):g} s" in src.resolution_note()  # 2 figures
    time.sleep(2 * SCRAPE_S)
    reading = src.read(time.time())
    checked = 0
    for batch in reading.batches:
        if not str(batch.device).startswith("node-"):
            continue
        host, gpu = batch.device.split("/", 1)
        for metric, series, scale in (("util_pct", "DCGM_FI_DEV_GPU_UTIL", 1.0),
                                      ("mem_used_bytes", "DCGM_FI_DEV_FB_USED", 2**20),
                                      ("power_w", "DCGM_FI_DEV_POWER_USAGE", 1.0)):
            served = _served_values(nodes[host], gpu, series)
            for t, v in zip(batch.times, batch.values[metric], strict=True):
                # Prometheus stamps a sample with the scrape's start; the exporter answered
                # within that scrape interval.
                near = [sv * scale for st, sv in served if abs(st - t) <= SCRAPE_S]
                assert any(np.isclose(v, x, rtol=1e-9) for x in near), (batch.device, metric, t, v)
                checked += 1
    assert checked >= 4 * 3 * 2


@pytest.mark.prometheus
def test_dcgm_exporter_text_through_prometheus(prometheus_cluster):  # noqa: F811
    server, _ = prometheus_cluster
    src = PrometheusSource(server.url)
    src.open()
    devices = {d.key: d for d in src.devices()}
    assert devices["dcgm-new/0"].name == "NVIDIA A100-SXM4-80GB"
    assert devices["dcgm-new/0"].mem_total_bytes == (40960 + 40000) * 2**20
    assert devices["dcgm-old/0"].node == "dcgm-old"  # from the lowercase hostname label
    assert "util_pct" not in devices["dcgm-new/1"].metrics  # only ever blank
    assert "power_w" not in devices["dcgm-new/1"].metrics
    time.sleep(2 * SCRAPE_S)
    rows = {b.device: b for b in src.read(time.time()).batches}
    new, old = rows["dcgm-new/0"].values, rows["dcgm-old/0"].values
    assert set(new["util_pct"]) == {87.0} and set(new["power_w"]) == {312.5}
    assert set(new["sm_active_pct"]) == {75.0} and set(new["energy_j"]) == {123456.789}
    assert set(new["clock_event_reasons"]) == {4.0}
    assert set(old["util_pct"]) == {55.0} and set(old["clock_event_reasons"]) == {64.0}
    assert set(old["mem_used_bytes"]) == {2048 * 2**20} and set(old["temp_c"]) == {71.0}


@pytest.mark.prometheus
def test_sampler_on_prometheus_groups_by_host(prometheus_cluster):  # noqa: F811
    server, _ = prometheus_cluster
    with Sampler(f"prometheus={server.url}", interval=0.5) as s:
        assert s.source.kind == "prometheus"
        time.sleep(3 * SCRAPE_S)
        latest = {row["gpu"]: row for row in s.latest()}
        assert latest["node-b/1"]["util_pct"] >= 0 and latest["node-b/1"]["state"] == "running"
        df = s.timeline.to_pandas()
        assert {"node-a/0", "node-b/1", "dcgm-old/0"} <= set(df["gpu"])
        assert df.loc[df["gpu"] == "node-a/0", "mem_used_bytes"].notna().sum() >= 2
        assert s.errors == 0, s.last_error
