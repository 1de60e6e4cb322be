"""A capture's edges read the energy counter only where it can resolve the block.

The sampler and its simulated GPUs share a fake clock that only the test moves, so a
block lasts exactly what the test says; the sampler's thread only serves the edge reads.
"""

from __future__ import annotations

import pytest

import nbgpu
from conftest_profiles import clean_profiles_fixture  # noqa: F401 - fixture
from nbgpu.profiles.energy import COUNTER_MIN_S
from nbgpu.sampler_thread import wait_for_edge

ENERGY = "nvmlDeviceGetTotalEnergyConsumption"


@pytest.fixture
def sim_and_sampler(stepped, clean_profiles, monkeypatch):
    from nbgpu import sampler_thread

    # The thread only serves the edge reads: on a loaded machine it may take more than the
    # product's 0.5 s to be scheduled, and a capture's end would then fall back to power
    monkeypatch.setattr(sampler_thread, "EDGE_WAIT_S", 10.0)
    clock = stepped.new_clock()
    sim = nbgpu.SimulatedGPUs(count=1, clock=clock)
    s = nbgpu.Sampler(source=sim, interval=0.1, energy_every_s=600, clock=clock)
    for _ in range(5):  # the first tick reads the counter; then 0.5 s of readings
        clock.t += 0.1
        s.step(clock.t)
    s.start()
    yield sim, s, clock
    s.stop()


def test_a_short_block_reads_no_energy_counter_and_its_energy_is_from_power(sim_and_sampler):
    sim, s, clock = sim_and_sampler
    before = sim.calls[ENERGY]
    cap = nbgpu.capture(sampler=s).start()  # the counter was read 0.4 s ago: fresh
    clock.t += 0.05
    cap.finish()
    assert sim.calls[ENERGY] == before  # the end is too short for the counter's steps
    row = cap.summarized().rows[0]
    assert cap.duration_s == pytest.approx(0.05)
    assert row["energy_source"] == "power"
    assert row["energy_j"] == pytest.approx(row["power_mean_w"] * cap.duration_s, rel=0.05)


def test_a_long_block_reads_the_counter_at_its_end(sim_and_sampler):
    sim, s, clock = sim_and_sampler
    before = sim.calls[ENERGY]
    cap = nbgpu.capture(sampler=s).start()
    clock.t += COUNTER_MIN_S + 0.1
    # The thread may tick at the new time before the end asks for the counter; a second row of
    # a stream at the very same time is not kept (a fake clock's artefact): let that tick come
    # first, then end the block a millisecond later, as a real clock would.
    assert wait_for_edge(s, clock.t)
    clock.t += 1e-3
    cap.finish()
    assert sim.calls[ENERGY] == before + 1
    assert cap.summarized().rows[0]["energy_source"] == "counter"


def test_a_start_long_after_the_last_counter_reading_asks_for_one(sim_and_sampler):
    sim, s, clock = sim_and_sampler
    clock.t += 3.0  # past COUNTER_FRESH_S since the first tick's reading
    before = sim.calls[ENERGY]
    cap = nbgpu.capture(sampler=s).start()
    clock.t += 0.05
    cap.finish()  # waits for the edge read, which follows the start's counter read
    assert sim.calls[ENERGY] == before + 1


def test_a_long_block_drains_every_sample_buffer_at_its_end(sim_and_sampler):
    sim, s, clock = sim_and_sampler
    kinds: list[int] = []
    original = sim.nvmlDeviceGetSamples

    def spy(handle, kind, since):
        kinds.append(kind)
        return original(handle, kind, since)

    cap = nbgpu.capture(sampler=s).start()
    clock.t += COUNTER_MIN_S + 0.3
    sim.nvmlDeviceGetSamples = spy
    cap.finish()
    assert set(kinds) == {0, 1, 2}  # power, utilisation, memory-bandwidth utilisation
    t, _ = s.timeline.series(0, "util_pct")
    assert t[-1] > cap.end_time - 0.2  # the end's utilisation sample is in
