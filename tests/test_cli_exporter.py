"""The Prometheus exporter: dcgm-exporter names and labels, valid text, an HTTP endpoint."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from conftest_cli import prometheus_binary
from nbgpu import Sampler, SimulatedGPUs
from nbgpu.exporter import CONTENT_TYPE, prometheus_text, render, serve
from nbgpu.exporter.text import FAMILIES, escape_label

LINE = re.compile(r'^([A-Za-z_:][A-Za-z0-9_:]*)\{(.*)\} (\S+)$')


def parse(text: str) -> dict[tuple[str, str], float]:
    """{(metric name, gpu label): value} from exposition text, checking every line's shape."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) \S+ .+$", line), line
            continue
        m = LINE.match(line)
        assert m, line
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
    text = sampler.prometheus_text(hostname="node-7")
    values = parse(text)
    latest = {row["gpu"]: row for row in sampler.latest()}
    # A scrape and latest() run moments apart; compare with what latest says right after.
    for gpu in (0, 1):
        assert values[("DCGM_FI_DEV_FB_USED", str(gpu))] == pytest.approx(
            latest[gpu]["mem_used_bytes"] / 2**20, rel=0.05)
        assert ("DCGM_FI_DEV_GPU_UTIL", str(gpu)) in values
        assert ("DCGM_FI_DEV_GPU_TEMP", str(gpu)) in values
        assert values[("nbgpu_gpu_power_limit_watts", str(gpu))] == 700
        assert 0 <= values[("DCGM_FI_PROF_SM_ACTIVE", str(gpu))] <= 1  # a ratio, as in DCGM
    first = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert re.search(r'gpu="0",UUID="GPU-sim[0-9a-f]+-0000-0000-0000-000000000000",device="nvidia0",'
                     r'model_name="NVIDIA H200 \(simulated\)",Hostname="node-7"', first), first
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
    dev = {"index": "0/1", "parent": 0, "mig": True, "uuid": "MIG-x", "name": 'odd "name"\\'}
    text = render([(dev, {"util_pct": math.nan, "mem_used_bytes": 2**21, "temp_c": None})], "h")
    assert "DCGM_FI_DEV_GPU_UTIL" not in text and "DCGM_FI_DEV_GPU_TEMP" not in text
    assert 'DCGM_FI_DEV_FB_USED{gpu="0",UUID="MIG-x",device="nvidia0",model_name="odd \\"name\\"\\\\",' \
           'Hostname="h",GPU_I_ID="1"} 2' in text
    assert escape_label("a\nb") == "a\\nb"
    assert render([], "h") == ""


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
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            body = resp.read().decode()
        assert "DCGM_FI_DEV_GPU_UTIL{" in body
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(exporter.url.replace("/metrics", "/nope"), timeout=5)
        assert err.value.code == 404


def test_scrape_of_eight_gpus_is_fast():
    s = Sampler(SimulatedGPUs(count=8), interval=0.2, host=False).start()
    try:
        time.sleep(0.5)
        with serve(s, port=0) as exporter:
            urllib.request.urlopen(exporter.url, timeout=5).read()
            t0 = time.perf_counter()
            for _ in range(20):
                urllib.request.urlopen(exporter.url, timeout=5).read()
            per_scrape_s = (time.perf_counter() - t0) / 20
        assert per_scrape_s < 0.05  # the benchmark holds it to 10 ms; CI machines are noisy
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
        for text in (sampler.prometheus_text(), mig.prometheus_text()):
            done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                                  text=True, timeout=30)
            assert done.returncode == 0, done.stdout + done.stderr
    finally:
        mig.stop()
