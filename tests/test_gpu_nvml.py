"""The engine's behaviours against the real NVML library; skipped only where NVML is absent."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import nbgpu
import nbgpu.metrics
from gpu_support import gpu_busy

pytestmark = pytest.mark.gpu


def test_devices_match_nvml(nvml):
    with nbgpu.Sampler(source="nvml") as s:
        assert len([d for d in s.devices if not d["mig"]]) == nvml.nvmlDeviceGetCount()
        d = s.devices[0]
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        assert d["mem_total_bytes"] == nvml.nvmlDeviceGetMemoryInfo(h).total
        for metric in ("mem_used_bytes", "temp_c", "power_w", "util_pct"):
            assert metric in d["metrics"]
        assert not s.simulated


def test_native_resolution_and_plausible_values_under_load(nvml):
    with nbgpu.Sampler(source="nvml", interval=1.0) as s:
        gpu_busy(4.0)
    tp, p = s.timeline.series(0, "power_w")
    tu, u = s.timeline.series(0, "util_pct")
    assert len(tp) > 20 and np.median(np.diff(tp)) <= 0.05
    assert len(tu) > 5 and np.median(np.diff(tu)) <= 0.25
    assert abs(tp[-1] - time.time()) < 5  # sample stamps are wall-clock seconds
    assert 10 < np.nanmax(p) < 2000
    assert np.nanmin(u) >= 0 and np.nanmax(u) <= 100
    assert s.errors == 0, s.last_error


def test_unsupported_metrics_are_absent_not_zero(nvml):
    with nbgpu.Sampler(source="nvml", interval=0.2) as s:
        time.sleep(1.0)
    df = s.timeline.to_pandas()
    for metric in {m.name for m in nbgpu.metrics.GPU_METRICS} - set(s.devices[0]["metrics"]):
        assert metric not in df.columns or df[metric].isna().all(), metric


def test_nvml_stays_initialised_for_other_users(nvml):
    with nbgpu.Sampler(source="nvml", interval=0.2):
        time.sleep(0.3)
    assert nvml.nvmlDeviceGetCount() >= 1  # would raise Uninitialized if we had shut it down


def test_one_thread_and_clean_stop(nvml):
    before = sum(t.name == "nbgpu-sampler" for t in threading.enumerate())
    s = nbgpu.Sampler(source="nvml", interval=0.2).start()
    assert sum(t.name == "nbgpu-sampler" for t in threading.enumerate()) == before + 1
    s.stop()
    assert sum(t.name == "nbgpu-sampler" for t in threading.enumerate()) == before


def test_exports_round_trip(nvml, tmp_path):
    import json

    with nbgpu.Sampler(source="nvml", interval=0.2) as s:
        time.sleep(1.0)
    path = s.timeline.to_jsonl(str(tmp_path / "run.jsonl"))
    with open(path) as fh:
        rec = json.loads(fh.readlines()[-1])
    assert rec["memory_total_gb"] > 1 and rec["power_w"] > 1


def test_bad_gpu_index_is_value_error(nvml):
    with pytest.raises(ValueError, match="out of range"):
        nbgpu.Sampler(source="nvml", gpus=[nvml.nvmlDeviceGetCount()])
