"""A capture's edges read the energy counter only where it can resolve the block."""

from __future__ import annotations

import math
import time

import pytest

import nbgpu
from conftest_profiles import clean_profiles_fixture  # noqa: F401 - fixture
from nbgpu.profiles.summary import COUNTER_MIN_S

ENERGY = "nvmlDeviceGetTotalEnergyConsumption"


@pytest.fixture
def sim_and_sampler(clean_profiles):
    sim = nbgpu.SimulatedGPUs(count=1)
    s = nbgpu.Sampler(source=sim, interval=0.1, energy_every_s=600).start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and math.isnan(s.store.last(0, "energy_j")[0]):
        time.sleep(0.01)  # the first tick's counter reading
    yield sim, s
    s.stop()


def test_a_short_block_reads_no_energy_counter_and_its_energy_is_from_power(sim_and_sampler):
    sim, s = sim_and_sampler
    before = sim.calls[ENERGY]
    with nbgpu.capture(sampler=s) as cap:
        time.sleep(0.05)
    assert sim.calls[ENERGY] == before  # a fresh reading anchors the start; the end is too short
    row = cap.summarized().rows[0]
    assert row["energy_source"] == "power"
    assert row["energy_j"] == pytest.approx(row["power_mean_w"] * cap.duration_s, rel=0.05)


def test_a_long_block_reads_the_counter_at_its_end(sim_and_sampler):
    sim, s = sim_and_sampler
    before = sim.calls[ENERGY]
    with nbgpu.capture(sampler=s) as cap:
        time.sleep(COUNTER_MIN_S + 0.1)
    assert sim.calls[ENERGY] >= before + 1
    assert cap.summarized().rows[0]["energy_source"] == "counter"
