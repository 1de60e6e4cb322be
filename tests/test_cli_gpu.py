"""`nbgpu record`, the report and the exporter on real GPUs; skipped only where NVML is absent."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.gpu

LOAD = """
import time
try:
    import torch
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + 6
    while time.time() < end:
        a @ a
    torch.cuda.synchronize()
except Exception:
    time.sleep(6)
raise SystemExit(3)
"""


@pytest.fixture(scope="module")
def nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:
        pytest.skip(f"NVML not available here: {exc}")
    yield pynvml
    pynvml.nvmlShutdown()


def test_record_and_report_on_real_gpus(nvml, tmp_path):
    out = tmp_path / "run.jsonl"
    done = subprocess.run([sys.executable, "-m", "nbgpu.cli", "record", "-o", str(out), "--",
                           sys.executable, "-c", LOAD], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    print(done.stderr)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    readings = [r for r in rows if "event" not in r]
    assert {r["gpu_id"] for r in readings} == set(range(nvml.nvmlDeviceGetCount()))
    gpu0 = [r for r in readings if r["gpu_id"] == 0]
    assert max(r["power_w"] or 0 for r in gpu0) > 0 and max(r["memory_total_gb"] or 0 for r in gpu0) > 1
    html = tmp_path / "run.html"
    assert subprocess.run([sys.executable, "-m", "nbgpu.cli", "report", str(out), "-o", str(html)],
                          timeout=60).returncode == 0
    assert "<svg" in html.read_text() and "(simulated)" not in html.read_text()


def test_exporter_on_real_gpus(nvml):
    from nbgpu import Sampler
    from nbgpu.exporter import prometheus_text

    with Sampler("nvml", interval=0.2, host=False) as s:
        time.sleep(1.0)
        text = prometheus_text(s)
        t0 = time.perf_counter()
        for _ in range(50):
            prometheus_text(s)
        print(f"prometheus_text for {len(s.devices)} GPU(s): {(time.perf_counter() - t0) / 50 * 1e3:.2f} ms")
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(smp.name, smp.labels.get("gpu")) for fam in text_string_to_metric_families(text)
               for smp in fam.samples}
    assert ("DCGM_FI_DEV_GPU_TEMP", "0") in samples and ("DCGM_FI_DEV_POWER_USAGE", "0") in samples
    promtool = shutil.which("promtool")
    if promtool:
        done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
