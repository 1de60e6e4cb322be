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
        assert len([d for d in s.devices if not d.mig]) == nvml.nvmlDeviceGetCount()
        d = s.devices[0]
        h = nvml.nvmlDeviceGetHandleByIndex(0)
        assert d.mem_total_bytes == nvml.nvmlDeviceGetMemoryInfo(h).total
        for metric in ("mem_used_bytes", "temp_c", "power_w", "util_pct"):
            assert metric in d.metrics
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
    for metric in {m.name for m in nbgpu.metrics.GPU_METRICS} - set(s.devices[0].metrics):
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


# -- the NVML gateway against the real library ------------------------------------------
def _opened_source():
    from nbgpu.sources.nvml import NVMLSource

    src = NVMLSource()
    src.open()
    return src


def test_gateway_capabilities_are_what_the_card_answers(nvml):
    from nbgpu.sources.base import Device
    from nbgpu.sources.nvml_gateway import NothingNewError, NotSupportedError, NVMLGateway

    src = _opened_source()
    try:
        card = src.devices()[0]
        assert isinstance(card, Device) and card.key == 0 and card.parent is None
        gw = NVMLGateway(nvml)
        h = gw.call("nvmlDeviceGetHandleByIndex", 0)
        try:
            gw.call("nvmlDeviceGetFanSpeed", h)
            has_fan = True
        except NotSupportedError:  # datacenter cards: absent, never an error
            has_fan = False
        assert isinstance(has_fan, bool)
        with pytest.raises(NotSupportedError):
            gw.call("nvmlDeviceGetSomethingFromTheFuture", h)
        try:
            gw.call("nvmlDeviceGetSamples", h, 0, 2**62)  # nothing newer than the far future
        except (NothingNewError, NotSupportedError):
            pass
        for metric in ("mem_used_bytes", "temp_c", "power_w"):
            assert metric in card.metrics
    finally:
        src.close()


def test_memory_tier_reads_only_memory_used_on_the_real_card(nvml):
    src = _opened_source()
    try:
        now = time.time()
        src.read(now, frozenset({"tick"}))
        reading = src.read(now + 0.01, frozenset({"memory"}))
        mem = [b for b in reading.batches if b.stream == "memory"]
        assert mem and all(set(b.values) == {"mem_used_bytes"} for b in mem)
        total = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(0)).total
        assert 0 < mem[0].values["mem_used_bytes"] <= total
        assert reading.errors == []
    finally:
        src.close()


def test_processes_list_a_child_holding_memory(nvml, tmp_path):
    import os
    import subprocess
    import sys

    pytest.importorskip("torch")
    ready = tmp_path / "ready"
    code = ("import sys, time, torch; x = torch.empty(2**30, dtype=torch.uint8, device='cuda:0'); "
            "open(sys.argv[1], 'w').close(); time.sleep(30)")
    child = subprocess.Popen([sys.executable, "-c", code, str(ready)])
    src = _opened_source()
    try:
        deadline = time.time() + 60
        while not ready.exists() and time.time() < deadline and child.poll() is None:
            time.sleep(0.1)  # a child process starting CUDA: no clock to fake
        assert ready.exists(), "the child did not allocate GPU memory"
        src.read(time.time(), frozenset({"procs"}))
        listed = src.processes.get(0, [])
        pids = {p.pid for p in listed}
        if child.pid in pids:
            mine = next(p for p in listed if p.pid == child.pid)
            assert mine.used_bytes is None or mine.used_bytes >= 2**30
            assert mine.user is not None
        else:  # a container's PID namespace: NVML's host PIDs are not ours
            assert all(not os.path.exists(f"/proc/{p.pid}") or p.name for p in listed)
            assert listed, "NVML listed no process although the child holds memory"
    finally:
        src.close()
        child.kill()
        child.wait()


def test_gpm_samples_are_freed_on_close(nvml, monkeypatch):
    from nbgpu.sources.nvml import NVMLSource

    live = {"n": 0}
    alloc, free = nvml.nvmlGpmSampleAlloc, nvml.nvmlGpmSampleFree

    def counting_alloc():
        sample = alloc()
        live["n"] += 1
        return sample

    def counting_free(sample):
        free(sample)
        live["n"] -= 1

    monkeypatch.setattr(nvml, "nvmlGpmSampleAlloc", counting_alloc)
    monkeypatch.setattr(nvml, "nvmlGpmSampleFree", counting_free)
    src = NVMLSource(nvml)
    src.open()
    gpm = "sm_active_pct" in src.devices()[0].metrics
    for i in range(3):
        src.read(time.time() + 0.1 * i, frozenset({"tick"}))
    src.close()
    assert live["n"] == 0, f"{live['n']} GPM samples left allocated (GPM offered: {gpm})"


def _util_drains_and_series(watched: bool, seconds: float, monkeypatch):
    """Utilisation drains made and the util series, a sampler at defaults run ``seconds``."""
    from nbgpu.sources import nvml_gateway, nvml_reads

    kinds: list[int] = []
    original = nvml_gateway.NVMLGateway.samples

    def counted(self, handle, sampling_type, since_us):
        kinds.append(sampling_type)
        return original(self, handle, sampling_type, since_us)

    monkeypatch.setattr(nvml_gateway.NVMLGateway, "samples", counted)
    s = nbgpu.Sampler(source="nvml", gpus=[0])
    if watched:
        s.add_listener(lambda sampler, _now: sampler.watch())
    s.start()
    gpu_busy(seconds)
    s.stop()
    stopped = time.time()
    util_type = nvml_reads.SAMPLES_GPU_UTIL
    return kinds.count(util_type), s.timeline.series(0, "util_pct")[0], stopped


def test_utilisation_keeps_every_sample_whether_watched_or_not(nvml, monkeypatch):
    unwatched, t, stopped = _util_drains_and_series(False, 12.0, monkeypatch)
    watched, tw, _ = _util_drains_and_series(True, 12.0, monkeypatch)
    assert unwatched < watched  # every 10 s, every 5 s (plus the first and the last)
    for series in (t, tw):
        gaps = np.diff(series[series > series[0] + 0.5])
        assert np.median(gaps) <= 0.25 and gaps.max() <= 0.45  # the card's 200 ms, none lost
    assert t[-1] >= stopped - 1.0  # stopping drained what the buffer still held


def test_idle_seconds_after_work_are_not_shown_busy(nvml):
    """Issue 34: an unwatched sampler, 8 s of bf16 matmuls then 4 s idle, read at once. The idle
    ticks must not carry utilisation from before the buffer's last drain (98 % beside idle power)."""
    s = nbgpu.Sampler(source="nvml", interval=1.0, diagnostics=False).start()
    try:
        gpu_busy(7.0)
        s.request("edge")  # the last utilisation drain is made while the card is busy
        gpu_busy(1.0)
        end = time.time()
        time.sleep(4.0)
        df = s.timeline.to_pandas()
    finally:
        s.stop()
    mine = df[df["gpu"] == 0]
    idle = mine[mine["time"].astype("int64") / 1e9 > end + 0.5]
    assert len(idle) >= 2
    assert not (idle["util_pct"] > 50).any(), idle[["time", "util_pct", "power_w"]].to_string()
    if idle["util_pct"].isna().any():
        assert "util_pct" in df.attrs["not_drained"]
