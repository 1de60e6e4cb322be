"""NVML sample-buffer drains: one C call each, none that cannot find anything, same samples."""

from __future__ import annotations

import numpy as np
import pytest

import nbgpu
from nbgpu.sources import nvml as nvml_mod
from nbgpu.sources.simulated import SimulatedGPUs
from test_engine_sampler import fake, run

POWER, UTIL, MEMUTIL = 0, 1, 2


def spy_c_calls(sim: SimulatedGPUs) -> list[int]:
    """The sampling type of every C-level nvmlDeviceGetSamples call, in order."""
    kinds: list[int] = []
    original = sim._samples_now

    def spy(handle, kind, since):
        kinds.append(kind)
        return original(handle, kind, since)

    sim._samples_now = spy
    return kinds


def test_a_drain_is_one_nvml_call():
    # pynvml's nvmlDeviceGetSamples asks NVML twice (how many, then the samples); each call
    # costs a whole buffer query, so a drain must pass room for the buffer and ask once.
    sim, clock = fake(1)
    kinds = spy_c_calls(sim)
    s = nbgpu.Sampler(source=sim, interval=0.5, energy_every_s=60, clock=clock)
    run(s, clock, 10.5)
    kinds.clear()
    s.request("energy")  # drains all three buffers now
    run(s, clock, 0.01)
    s.stop()
    assert sorted(kinds) == [POWER, UTIL, MEMUTIL]


def test_the_wrapper_of_an_older_binding_still_drains_the_same_samples():
    series = []
    for c_samples in (True, False):
        sim, clock = fake(1, c_samples=c_samples)
        s = nbgpu.Sampler(source=sim, interval=0.5, clock=clock)
        run(s, clock, 12.0)
        s.stop()
        series.append({m: s.timeline.series(0, m) for m in ("power_w", "util_pct", "mem_util_pct")})
    raw, wrapped = series
    for metric, (t, v) in raw.items():
        assert len(t) > 5, metric
        np.testing.assert_array_equal(t, wrapped[metric][0])
        np.testing.assert_array_equal(v, wrapped[metric][1])
    t, _ = raw["power_w"]
    assert np.median(np.diff(t)) == pytest.approx(0.02, abs=1e-6)  # native 20 ms kept


def test_a_buffer_bigger_than_the_room_given_grows_it(monkeypatch):
    monkeypatch.setattr(nvml_mod, "SAMPLE_CAPACITY", 4)
    sim, clock = fake(1)
    s = nbgpu.Sampler(source=sim, interval=0.5, clock=clock)
    run(s, clock, 3.0)
    s.stop()
    t, _ = s.timeline.series(0, "power_w")
    assert np.all(np.diff(t) < 0.021)  # no sample lost to the small first room
    assert s.source._gw._capacity > 4


def test_drains_that_cannot_find_a_new_sample_are_not_made():
    # A capture edge every 10 ms asks for drains; utilisation has a sample every 200 ms and
    # power every 20 ms, so most of those drains could only come back empty.
    sim, clock = fake(1)
    kinds = spy_c_calls(sim)
    s = nbgpu.Sampler(source=sim, interval=0.5, energy_every_s=60, clock=clock)
    run(s, clock, 3.0)
    kinds.clear()
    for _ in range(100):
        s.request("edge")
        run(s, clock, 0.01)
    s.stop()
    assert kinds.count(UTIL) <= 6 and kinds.count(MEMUTIL) <= 6
    assert 40 <= kinds.count(POWER) <= 56
    t, _ = s.timeline.series(0, "util_pct")
    assert np.median(np.diff(t[-10:])) == pytest.approx(0.2, abs=1e-6)  # none lost


def test_an_edge_read_reads_memory_and_not_the_energy_counter():
    sim, clock = fake(1)
    s = nbgpu.Sampler(source=sim, interval=5.0, energy_every_s=60, clock=clock)
    run(s, clock, 1.0)
    energy_calls = sim.calls["nvmlDeviceGetTotalEnergyConsumption"]
    n_mem = len(s.timeline.series(0, "mem_used_bytes")[0])
    s.request("edge")
    run(s, clock, 0.01)
    s.stop()
    assert sim.calls["nvmlDeviceGetTotalEnergyConsumption"] == energy_calls
    assert len(s.timeline.series(0, "mem_used_bytes")[0]) == n_mem + 1


@pytest.mark.parametrize("code, errors", [(999, 1), (3, 0)])
def test_faults_reach_the_one_call_drain(code, errors):
    sim, clock = fake(1)
    s = nbgpu.Sampler(source=sim, interval=0.5, energy_every_s=60, clock=clock)
    run(s, clock, 2.0)
    sim.inject_error("nvmlDeviceGetSamples", code, times=1)
    before = s.errors
    run(s, clock, 1.0)
    s.stop()
    assert s.errors - before >= errors
    if code == 3:  # NotSupported: that buffer is gone and its metric is polled instead
        assert len(s.source._devices[0].buffers) == 2
