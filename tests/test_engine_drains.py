"""NVML sample-buffer drains: none that cannot find anything new, edges without the counter."""

from __future__ import annotations

import numpy as np
import pytest

import nbgpu
from test_engine_sampler import fake, run, spy_drains

POWER, UTIL, MEMUTIL = 0, 1, 2


def test_drains_that_cannot_find_a_new_sample_are_not_made():
    # A capture edge every 10 ms asks for drains; utilisation has a sample every 200 ms and
    # power every 20 ms, so most of those drains could only come back empty.
    sim, clock = fake(1)
    kinds = spy_drains(sim)
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
def test_drain_faults_are_counted_and_an_unsupported_buffer_is_polled(code, errors):
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
