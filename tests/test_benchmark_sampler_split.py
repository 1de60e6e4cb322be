"""The sampler benchmark's split into NVML calls and nbgpu's Python counts one span for both.

The thread's CPU is read from the first tick to the last; the NVML calls must be counted
over that same span, not up to ``stop()`` (which shuts NVML down after the last tick).
"""

from __future__ import annotations

import pytest

import nbgpu
from benchmarks.sampler_cost import TickSnapshots, split_by_function, timed_nvml_calls
from benchmarks.threadcpu import measure


def _stepped_run(stepped, steps: int) -> tuple[TickSnapshots, dict, int]:
    """A sampler on one simulated GPU, stepped on a fake clock, then stopped: the snapshots,
    the whole call table (stop included) and the calls the ticks' span saw."""
    clock = stepped.new_clock()
    with timed_nvml_calls() as table:
        sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=1, seed=0, clock=clock), clock=clock)
        ticks = TickSnapshots(table)
        sampler.add_listener(ticks)
        for _ in range(steps):
            clock.t += 1.0
            sampler.step(clock.t)
        at_last_tick = sum(int(row[0]) for row in table.values())
        sampler.stop()
        whole = {fn: list(row) for fn, row in table.items()}
    return ticks, whole, at_last_tick


def test_calls_made_by_stop_after_the_last_tick_are_not_in_the_split(stepped) -> None:
    ticks, whole, _ = _stepped_run(stepped, 5)
    assert whole["nvmlShutdown"][0] == 1  # stop() did call it, through the timed gateway
    steady = ticks.steady()
    assert "nvmlShutdown" not in steady


def test_the_split_counts_exactly_the_calls_between_the_first_and_the_last_tick(stepped) -> None:
    ticks, _, at_last_tick = _stepped_run(stepped, 6)
    at_first_tick = sum(int(row[0]) for row in (ticks.first or {}).values())
    steady = ticks.steady()
    assert sum(int(row[0]) for row in steady.values()) == at_last_tick - at_first_tick
    assert steady["nvmlDeviceGetTemperature"][0] == 5  # one a tick, the first tick's left out


def test_split_by_function_leaves_nbgpus_python_as_the_rest_of_the_threads_cpu() -> None:
    steady = {"nvmlDeviceGetSamples": [20, 0.030, 0.031], "nvmlDeviceGetTemperature": [10, 0.001, 0.001]}
    split = split_by_function(steady, wall_s=10.0, thread_cpu_s_per_s=0.0045)
    assert list(split["per_function"]) == ["nvmlDeviceGetSamples", "nvmlDeviceGetTemperature"]
    assert split["per_function"]["nvmlDeviceGetSamples"]["calls_per_s"] == pytest.approx(2.0)
    assert split["per_function"]["nvmlDeviceGetSamples"]["cpu_us_per_call"] == pytest.approx(1500.0)
    assert split["nvml_cpu_ms_per_s"] == pytest.approx(3.1)
    assert split["python_cpu_ms_per_s"] == pytest.approx(1.4)


class _StepsOnStop:
    """A sampler stand-in whose thread's steps are calls: three ticks on start, and the one
    more step a real sampler's thread makes when it stops (its final drains)."""

    running = False
    errors, last_error = 0, None

    def __init__(self, table: dict) -> None:
        self.listeners: list = []
        self.table = table

    def add_listener(self, fn) -> None:
        self.listeners.append(fn)

    def remove_listener(self, fn) -> None:
        self.listeners.remove(fn)

    def _step(self, function: str) -> None:
        self.table.setdefault(function, [0, 0.0, 0.0])[0] += 1
        for fn in list(self.listeners):
            fn(self, 0.0)

    def start(self) -> None:
        for _ in range(3):
            self._step("nvmlDeviceGetTemperature")

    def stop(self) -> None:
        self._step("nvmlDeviceGetSamples")


def test_the_step_stop_makes_after_the_last_tick_is_in_neither_figure() -> None:
    # The sampler's thread ends with one more step (its buffers' final drains) that runs
    # the listeners too; the snapshots must stop where the probe's figure stops.
    table: dict = {}
    sampler = _StepsOnStop(table)
    ticks = TickSnapshots(table)
    res = measure(sampler, 0.0, listeners=(ticks,))
    assert table["nvmlDeviceGetSamples"][0] == 1  # stop() did step
    assert ticks.calls == res["ticks"] == 3
    assert "nvmlDeviceGetSamples" not in ticks.steady()
    assert sampler.listeners == []
