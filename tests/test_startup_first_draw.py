"""A new panel's first draw: at once when its sampler has already read, else when it has."""

from __future__ import annotations

import pytest

import nbgpu
from conftest_panel import show
from nbgpu.sources.simulated import SimulatedGPUs
from nbgpu.widgets import monitor, registry
from nbgpu.widgets.registry import RefreshSchedule


@pytest.fixture
def schedule(monkeypatch):
    sched = RefreshSchedule(clock=lambda: 0.0, thread=False)
    monkeypatch.setattr(monitor, "SCHEDULE", sched)
    yield sched
    registry.close_all()


def _sampler(stepped, ticks: int) -> nbgpu.Sampler:
    clock = stepped.new_clock()
    s = nbgpu.Sampler(source=SimulatedGPUs(count=1, clock=clock), interval=0.1, clock=clock)
    for _ in range(ticks):
        clock.t += 0.1
        s.step(clock.t)
    return s


def test_a_sampler_that_has_read_is_drawn_at_once(schedule, stepped) -> None:
    s = _sampler(stepped, ticks=1)
    mon = monitor.GPUMonitor(sampler=s)
    show(mon)
    assert schedule.step(0.0) == 1  # due now, not FIRST_DRAW_S later
    assert mon.stats["refreshes"] == 1
    s.stop()


def test_a_sampler_yet_to_read_is_looked_at_again_soon(schedule, stepped) -> None:
    s = _sampler(stepped, ticks=0)
    sim = s.source._nvml
    sim.inject_hang("nvmlDeviceGetMemoryInfo", 30.0)  # running, its first read not done
    s.start()
    try:
        assert sim.wait_hanging()
        show(monitor.GPUMonitor(sampler=s))
        assert schedule.step(0.0) == 0
        assert schedule.step(monitor.FIRST_DRAW_S) == 1
    finally:
        sim.release_hangs()
        s.stop()


def test_a_panel_made_without_start_is_drawn_when_started(schedule, stepped) -> None:
    s = _sampler(stepped, ticks=1)
    mon = monitor.GPUMonitor(sampler=s, start=False)
    show(mon)
    assert schedule.step(0.0) == 0 and not mon.running
    mon.start()
    assert schedule.step(0.0) == 1 and mon.stats["refreshes"] == 1
    s.stop()


def test_gpumon_starts_its_panel_after_displaying_it(schedule, monkeypatch) -> None:
    """The at-once first draw must follow the display, or the front end's first update waits."""
    from IPython.core.interactiveshell import InteractiveShell

    from nbgpu import session
    from nbgpu.magics import gpumon

    order = []
    monkeypatch.setattr(gpumon, "display", lambda mon: order.append(("display", mon.running)))
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "nbgpu")
    try:
        sh.run_line_magic("gpumon", "--source sim")
        assert order == [("display", False)] and registry.panels()[0].running
    finally:
        sh.run_line_magic("unload_ext", "nbgpu")
        session.reset()
