"""The simulated NVML's own fault and process injection, as other tests rely on it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from nbgpu.sources.nvml import NVMLSource
from nbgpu.sources.sim_faults import HOST_PID_OFFSET
from nbgpu.sources.simulated import SimulatedGPUs

PROCS = frozenset({"procs"})


@pytest.fixture
def sim():
    s = SimulatedGPUs(count=2, clock=lambda: 1_700_000_100.0)
    s.start_time = 1_700_000_000.0  # 100 s into the run: the model's process holds memory
    s.nvmlInit()
    yield s
    s.release_hangs()
    s.nvmlShutdown()


def test_an_injected_hang_blocks_the_call_until_released(sim):
    sim.inject_hang("nvmlDeviceGetMemoryInfo", 30.0, gpu=1)
    handle = sim.nvmlDeviceGetHandleByIndex(1)
    done = threading.Event()
    worker = threading.Thread(target=lambda: (sim.nvmlDeviceGetMemoryInfo(handle), done.set()))
    worker.start()
    assert sim.wait_hanging(5.0)
    assert sim.hanging == 1 and not done.is_set()
    sim.nvmlDeviceGetMemoryInfo(sim.nvmlDeviceGetHandleByIndex(0))  # other GPUs answer
    sim.release_hangs()
    worker.join(5.0)
    assert done.is_set() and sim.hanging == 0


def test_a_hang_injected_once_hangs_one_call(sim):
    sim.inject_hang("nvmlDeviceGetCount", 0.0)
    sim.nvmlDeviceGetCount()
    sim.inject_hang("nvmlDeviceGetCount", 30.0, times=None)
    sim.release_hangs()
    assert not sim.wait_hanging(0.0)
    sim.nvmlDeviceGetCount()  # released hangs are gone, not waiting for the next caller


def test_gpm_samples_are_counted_until_freed(sim):
    a, b = sim.nvmlGpmSampleAlloc(), sim.nvmlGpmSampleAlloc()
    assert sim.gpm_samples_live == 2
    sim.nvmlGpmSampleFree(a)
    sim.nvmlGpmSampleFree(b)
    assert sim.gpm_samples_live == 0


def test_processes_of_this_kernel_a_child_this_user_and_another_user():
    sim = SimulatedGPUs(count=1, clock=lambda: 1_700_000_100.0)
    sim.start_time = 1_700_000_000.0
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        sim.add_process(0, child.pid, 3 * 2**30)
        sim.add_process(0, os.getppid(), 2**30)
        sim.add_process(0, 99_999_001, 5 * 2**30, name="train.py", user="someone-else")
        src = NVMLSource(sim)
        src.open()
        src.read(1_700_000_100.0, PROCS)
        listed = {p.pid: p for p in src.processes[0]}
        src.close()
    finally:
        child.kill()
        child.wait()
    import psutil

    me = psutil.Process().username()
    assert listed[os.getpid()].user == me and listed[os.getpid()].used_bytes > 0
    assert listed[child.pid].user == me and listed[child.pid].used_bytes == 3 * 2**30
    assert listed[child.pid].name == psutil.Process().name()
    assert listed[os.getppid()].used_bytes == 2**30
    assert (listed[99_999_001].name, listed[99_999_001].user) == ("train.py", "someone-else")


def test_a_pid_namespace_that_hides_host_pids_lists_pids_unknown_here():
    sim = SimulatedGPUs(count=1, clock=lambda: 1_700_000_100.0, hide_host_pids=True)
    sim.start_time = 1_700_000_000.0
    sim.add_process(0, os.getppid(), 2**30)
    src = NVMLSource(sim)
    src.open()
    src.read(1_700_000_100.0, PROCS)
    listed = src.processes[0]
    src.close()
    assert {p.pid for p in listed} == {os.getpid() + HOST_PID_OFFSET, os.getppid() + HOST_PID_OFFSET}
    assert all(p.name is None and p.user is None for p in listed)
    assert all(p.used_bytes > 0 for p in listed)


def test_a_memory_spike_shows_only_while_it_lasts():
    t = [1_700_000_000.0]
    sim = SimulatedGPUs(count=2, clock=lambda: t[0])
    sim.nvmlInit()
    h0, h1 = sim.nvmlDeviceGetHandleByIndex(0), sim.nvmlDeviceGetHandleByIndex(1)
    sim.add_memory_spike(0, at=t[0] + 1.0, seconds=0.08, extra_bytes=16 * 2**30)
    t[0] += 1.04
    during = sim.nvmlDeviceGetMemoryInfo(h0).used - sim.mem_used_at(0, 1.04)
    other = sim.nvmlDeviceGetMemoryInfo(h1).used - sim.mem_used_at(1, 1.04)
    t[0] += 0.05
    after = sim.nvmlDeviceGetMemoryInfo(h0).used - sim.mem_used_at(0, 1.09)
    sim.nvmlShutdown()
    assert during == pytest.approx(16 * 2**30, abs=2**20)  # the ramp moves a little too
    assert abs(other) <= 2**20 and abs(after) <= 2**20


def test_the_sim_source_starts_at_its_steady_load():
    """"sim" GPUs are past their start-up ramp before the first cell: the first readings show
    the steady memory and load (a re-run cell must not read as a regression)."""
    import time

    from nbgpu import Sampler

    s = Sampler(source="sim", interval=0.1)  # stepped here, no thread: its first readings
    try:
        t0 = time.time()
        for i in range(3):
            s.step(t0 + 0.1 * i)
        df = s.timeline.to_pandas()
    finally:
        s.stop()
    first = df.dropna(subset=["mem_used_bytes", "sm_active_pct"]).groupby("gpu").head(1)
    assert len(first) == 2, df
    assert (first["mem_used_bytes"] > 0.45 * first["mem_total_bytes"]).all(), first
    assert (first["sm_active_pct"] > 50).all(), first  # loaded, not the idle start of the ramp


@pytest.mark.parametrize("scenario", ["steady", "input_bound", "throttle", "idle"])
def test_a_buffer_drain_holds_the_load_models_value_at_each_samples_time(scenario):
    """A drain computes its samples as arrays; each must equal the model asked at that one time."""
    t = [1_700_000_000.0]
    sim = SimulatedGPUs(count=2, scenario=scenario, clock=lambda: t[0], warm_s=0.9)  # the ramp too
    sim.nvmlInit()
    h = sim.nvmlDeviceGetHandleByIndex(1)
    t[0] += 2.0
    for kind, period, model in ((0, 0.02, lambda s: sim.power_at(1, s) * 1000.0),
                                (1, 0.2, lambda s: sim.util_window(1, s, 0.2)),
                                (2, 0.2, lambda s: sim.util_window(1, s, 0.2) * 0.45)):
        _, samples = sim.nvmlDeviceGetSamples(h, kind, 0)
        assert len(samples) > 5
        for x in samples:
            at_s = round((x.timeStamp / 1e6 - sim.start_time) / period) * period
            assert x.sampleValue.uiVal == max(round(model(at_s)), 0), (kind, at_s)
