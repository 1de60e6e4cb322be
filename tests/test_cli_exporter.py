"""The Prometheus exporter: dcgm-exporter names and labels, valid text, an HTTP endpoint."""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from conftest_cli import free_port, prometheus_binary, to_text
from nbgpu import Sampler, SimulatedGPUs
from nbgpu.exporter import families, prometheus_text, serve
from nbgpu.sources.base import Device
from nbgpu.sources.prometheus import FAMILIES

LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})? (\S+)$')


def parse(text: str) -> dict[tuple[str, str], float]:
    """{(metric name, gpu label): value} from exposition text, checking every line's shape."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) \S+ .+$", line), line
            continue
        m = LINE.match(line)
        assert m, line
        if m.group(2) is None:  # the sampler's own counters carry no GPU label
            assert m.group(1).startswith("nbgpu_sampler_"), line
            continue
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
        out[(m.group(1), labels["gpu"] + ("/" + labels["GPU_I_ID"] if "GPU_I_ID" in labels else ""))] = \
            float(m.group(3))
    return out


@pytest.fixture
def sampler():
    s = Sampler(SimulatedGPUs(count=2, seed=3), interval=0.1, host=False).start()
    time.sleep(0.6)
    yield s
    s.stop()


def test_dcgm_names_units_and_labels(sampler):
    for _ in range(20):  # a scrape between two equal latest() reads: no tick came in between
        before = {row["gpu"]: row["mem_used_bytes"] for row in sampler.latest()}
        text = prometheus_text(sampler, hostname="node-7")
        if before == {row["gpu"]: row["mem_used_bytes"] for row in sampler.latest()}:
            break
    values = parse(text)
    for gpu in (0, 1):
        assert values[("DCGM_FI_DEV_FB_USED", str(gpu))] == pytest.approx(before[gpu] / 2**20, abs=1)
        assert ("DCGM_FI_DEV_GPU_UTIL", str(gpu)) in values
        assert ("DCGM_FI_DEV_GPU_TEMP", str(gpu)) in values
        assert values[("nbgpu_gpu_power_limit_watts", str(gpu))] == 700
        assert 0 <= values[("DCGM_FI_PROF_SM_ACTIVE", str(gpu))] <= 1  # a ratio, as in DCGM
    first = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', first))
    assert labels == {"gpu": "0", "UUID": labels["UUID"], "device": "nvidia0",
                      "model_name": "NVIDIA H200 (simulated)", "Hostname": "node-7"}, first
    assert re.fullmatch(r"GPU-sim[0-9a-f]+-0000-0000-0000-000000000000", labels["UUID"])
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in text
    assert 'nbgpu_gpu_info{' in text and 'simulated="true"' in text
    # GPU metrics only: nothing about host processes or users.
    assert "host_" not in text and "proc_" not in text and "pid" not in text


def test_every_family_has_a_unique_valid_name():
    names = [f.name for f in FAMILIES]
    assert len(names) == len(set(names))
    for f in FAMILIES:
        assert re.match(r"^(DCGM_FI_[A-Z_]+|nbgpu_gpu_[a-z_]+)$", f.name), f.name


def test_missing_values_are_left_out_and_mig_gets_instance_label():
    dev = Device("0/1", 'odd "name" 1g.18gb\\', "MIG-x", parent=0, mig=True)
    text = to_text(families([(dev, {"util_pct": math.nan, "mem_used_bytes": 2**21, "temp_c": None})], "h"))
    assert "DCGM_FI_DEV_GPU_UTIL" not in text and "DCGM_FI_DEV_GPU_TEMP" not in text
    assert 'DCGM_FI_DEV_FB_USED{GPU_I_ID="1",GPU_I_PROFILE="1g.18gb",Hostname="h",UUID="MIG-x",' \
           'device="nvidia0",gpu="0",model_name="odd \\"name\\" 1g.18gb\\\\"} 2.0' in text
    assert to_text(families([], "h")) == ""


def test_lost_gpu_is_not_exported():
    sim = SimulatedGPUs(count=2)
    s = Sampler(sim, interval=0.1, host=False).start()
    try:
        time.sleep(0.3)
        sim.lose_gpu(1)
        deadline = time.time() + 5
        while 1 not in s.lost and time.time() < deadline:
            time.sleep(0.05)
        text = prometheus_text(s, "h")
        assert 'gpu="0"' in text and 'gpu="1"' not in text
    finally:
        s.stop()


def test_http_endpoint_serves_metrics_on_localhost(sampler):
    with serve(sampler, port=0, hostname="h") as exporter:
        assert exporter.host == "127.0.0.1"
        with urllib.request.urlopen(exporter.url, timeout=5) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == CONTENT_TYPE_PLAIN_0_0_4
            body = resp.read().decode()
        assert "DCGM_FI_DEV_GPU_UTIL{" in body
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(exporter.url.replace("/metrics", "/nope"), timeout=5)
        assert err.value.code == 404


def test_closing_twice_or_after_the_loop_ended_frees_the_port_and_never_raises(sampler):
    exporter = serve(sampler, port=0, hostname="h")
    exporter.close()
    exporter.close()  # the loop ended and closed its trigger: nothing left to wake
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", exporter.port))  # the port is free again


def test_a_scrape_of_eight_gpus_reads_only_the_newest_values(monkeypatch):
    # What keeps a scrape cheap (exporter_scrape times it): the newest row of each metric,
    # no NVML call from the server's thread and no read of the stored history.
    from nbgpu.sources.nvml_gateway import NVMLGateway
    from nbgpu.store import Store

    s = Sampler(SimulatedGPUs(count=8), interval=0.2, host=False).start()
    callers: set[str] = set()
    history_reads: list[str] = []
    gateway_call = NVMLGateway.call

    def call(self, function, *args):
        callers.add(threading.current_thread().name)
        return gateway_call(self, function, *args)

    def reading(name):
        plain = getattr(Store, name)

        def read(self, *args, **kwargs):
            history_reads.append(name)
            return plain(self, *args, **kwargs)
        return read

    try:
        deadline = time.monotonic() + 20
        while s.ticks < 2 and time.monotonic() < deadline:  # values to scrape
            time.sleep(0.02)
        monkeypatch.setattr(NVMLGateway, "call", call)
        for name in ("series", "read_stream", "series_rows"):
            monkeypatch.setattr(Store, name, reading(name))
        with serve(s, port=0) as exporter:
            bodies = [urllib.request.urlopen(exporter.url, timeout=5).read().decode() for _ in range(20)]
        assert callers <= {"nbgpu-sampler"}, callers
        assert history_reads == []
        assert all(all(f'gpu="{i}"' in body for i in range(8)) for body in bodies)
    finally:
        s.stop()


@pytest.mark.prometheus
def test_promtool_accepts_the_output(sampler):
    prometheus_binary()
    promtool = shutil.which("promtool")
    assert promtool, "promtool comes with the prometheus package"
    mig = Sampler(SimulatedGPUs(count=2, mig={1: 2}), interval=0.1, host=False).start()
    try:
        time.sleep(0.4)
        for text in (prometheus_text(sampler), prometheus_text(mig)):
            done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                                  text=True, timeout=30)
            assert done.returncode == 0, done.stdout + done.stderr
    finally:
        mig.stop()


def _closed_by_server(sock: socket.socket, within_s: float) -> bool:
    """Whether the server closes ``sock`` (EOF or reset) within ``within_s`` seconds."""
    sock.settimeout(within_s)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_slow_header_connections_are_closed_and_scrapes_still_answered(sampler):
    with serve(sampler, port=0, timeout_s=1) as exporter:
        slow = []
        for _ in range(40):
            sock = socket.create_connection((exporter.host, exporter.port), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            slow.append(sock)
        with urllib.request.urlopen(exporter.url, timeout=5) as resp:  # not starved by them
            assert resp.status == 200 and b"DCGM_FI_DEV_GPU_UTIL" in resp.read()
        t0 = time.monotonic()
        closed = [_closed_by_server(sock, max(0.1, 6 - (time.monotonic() - t0))) for sock in slow]
        for sock in slow:
            sock.close()
        assert all(closed), f"{closed.count(False)} of 40 slow connections still open after 6 s"


def test_a_burst_of_200_connects_waits_on_no_backlog(sampler):
    with serve(sampler, port=0) as exporter:
        connect_s: list[float] = []
        answered: list[int] = []
        lock = threading.Lock()

        def one() -> None:
            t0 = time.perf_counter()
            with socket.create_connection((exporter.host, exporter.port), timeout=10) as sock:
                took = time.perf_counter() - t0
                sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                data = b""
                while chunk := sock.recv(65536):
                    data += chunk
            with lock:
                connect_s.append(took)
                answered.append(int(data.split(b" ", 2)[1]))

        threads = [threading.Thread(target=one) for _ in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert answered == [200] * 200
        # A SYN dropped by a full backlog is retried after a second; none may wait that long.
        assert max(connect_s) < 0.9, sorted(connect_s)[-5:]


def test_head_is_answered_and_the_server_header_names_no_python(sampler):
    with serve(sampler, port=0) as exporter:
        with urllib.request.urlopen(urllib.request.Request(exporter.url, method="HEAD"), timeout=5) as resp:
            assert resp.status == 200 and resp.read() == b""
            assert int(resp.headers["Content-Length"]) > 0
            assert resp.headers["Content-Type"] == CONTENT_TYPE_PLAIN_0_0_4
            server = resp.headers["Server"]
        assert "python" not in server.lower() and not re.search(r"\d+\.\d+", server), server
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(exporter.url, data=b"x", method="POST"), timeout=5)
        assert err.value.code == 405


def test_client_disconnects_mid_response_print_no_traceback(tmp_path):
    port = free_port()
    cmd = [sys.executable, "-m", "nbgpu.cli", "export", "--source", "sim", "--interval", "0.2",
           "--port", str(port)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(url, timeout=2).read()
                break
            except OSError:
                assert time.time() < deadline and proc.poll() is None, "exporter did not start"
                time.sleep(0.2)
        for _ in range(50):  # ask, then reset the connection before reading the answer
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.close()
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "Error" not in err, err


def test_export_listens_on_the_configured_port_without_port_flag():
    """``NBGPU_EXPORTER_PORT`` (``NbGpu.exporter_port``) is the port when ``--port`` is not given."""
    port = free_port()
    cmd = [sys.executable, "-m", "nbgpu.cli", "export", "--source", "sim", "--interval", "0.2"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=dict(os.environ, NBGPU_EXPORTER_PORT=str(port)))
    try:
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                    assert b"DCGM_FI_DEV_GPU_UTIL" in resp.read()
                break
            except OSError:
                assert time.time() < deadline and proc.poll() is None, "exporter did not listen there"
                time.sleep(0.2)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
