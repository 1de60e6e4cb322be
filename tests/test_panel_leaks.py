"""Panels leak nothing: every widget closed, one timer for all, stopped panels cost nothing,
stale values never look live; a 24 h session with a fake clock keeps the panel bounded."""

from __future__ import annotations

import time

import ipywidgets
import numpy as np
import pytest
from ipywidgets.widgets import widget as ipywidget

from conftest_panel import parts, show
from nbgpu import Sampler, SimulatedGPUs, session
from nbgpu.widgets import registry
from nbgpu.widgets.monitor import GPUMonitor
from nbgpu.widgets.panel_draw import BUCKETS
from nbgpu.widgets.registry import SCHEDULE

_mine: list[Sampler] = []


@pytest.fixture(autouse=True)
def _clean():
    yield
    registry.close_all()
    session.reset()
    while _mine:
        _mine.pop().stop()


def _instances() -> int:
    """Size of ipywidgets' registry of live widgets (what keeps their comms and memory)."""
    return len(ipywidget._instances)


def _stepped(stepped, count: int = 2, **kw) -> tuple[Sampler, object, SimulatedGPUs]:
    clock = stepped.new_clock(1.7e9)
    sim = SimulatedGPUs(count, seed=0, **kw)
    s = Sampler(sim, interval=0.1, clock=clock)
    _mine.append(s)
    return s, clock, sim


def _advance(s: Sampler, clock, seconds: float, dt: float = 0.1) -> None:
    for _ in range(round(seconds / dt)):
        clock.t += dt
        s.step(clock.t)


def _texts(mon: GPUMonitor) -> str:
    """Everything the panel shows as text, read from the widgets' synced state."""
    return " ".join(str(w.get_state().get("value", "")) for w in _html_widgets(mon))


def _html_widgets(mon: GPUMonitor) -> list:
    from nbgpu.widgets.registry import descendants

    return [w for w in descendants(mon) if isinstance(w, ipywidgets.HTML)]


def test_close_returns_the_widget_registry_to_its_size_before(stepped) -> None:
    s, clock, _ = _stepped(stepped, 8)
    _advance(s, clock, 2.0)
    before = _instances()
    mon = GPUMonitor(sampler=s, start=False)
    mon.refresh(force=True, now=clock.t)
    assert _instances() > before + 20  # a panel is dozens of widgets (layouts, styles, marks)
    mon.close()
    assert _instances() == before


def test_stop_closes_all_but_a_static_header_and_start_rebuilds(stepped) -> None:
    s, clock, _ = _stepped(stepped, 8)
    _advance(s, clock, 2.0)
    first = GPUMonitor(sampler=s, start=True)  # stopped panels share layouts and a style from here
    first.stop()
    first.close()
    before = _instances()
    mon = GPUMonitor(sampler=s, start=True)
    mon.refresh(force=True, now=clock.t)
    mon.stop()
    assert not mon.running and _instances() - before == 2  # the panel box and its header
    shown = _texts(mon)
    assert "panel stopped" in shown and "last values" in shown and "GPU 7" in shown
    mon.start()
    assert mon.running and _instances() > before + 20
    mon.close()
    assert _instances() == before


def test_a_stopped_panel_holds_no_closed_widget_its_restart_rebuilds(stepped) -> None:
    # A stopped panel stays on screen as long as its output does (hundreds in a long session):
    # what only drawing needs, its closed scales and labels, must be freed, not kept.
    import gc
    import weakref

    s, clock, _ = _stepped(stepped, 2)
    _advance(s, clock, 2.0)
    mon = GPUMonitor(sampler=s, start=True)
    mon.refresh(force=True, now=clock.t)
    drawn = [weakref.ref(w) for w in (*parts(mon).scales, parts(mon).lines, parts(mon).values)]
    mon.stop()
    gc.collect()
    assert [ref() for ref in drawn] == [None] * 4
    assert mon.refresh(force=True, now=clock.t) is False  # stopped: nothing is drawn
    mon.start()
    _advance(s, clock, 1.0)
    assert mon.refresh(force=True, now=clock.t) is True
    assert "GPU 1" in _texts(mon)
    mon.close()


def test_many_panels_share_one_timer_and_stopped_ones_are_off_it(stepped) -> None:
    s, clock, _ = _stepped(stepped, 2)
    _advance(s, clock, 1.0)
    panels = [GPUMonitor(sampler=s, refresh_s=0.25) for _ in range(5)]
    for p in panels:
        show(p)
    assert SCHEDULE.scheduled() == 5 and SCHEDULE.threads() == 1
    for p in panels[:3]:
        p.stop()
    assert SCHEDULE.scheduled() == 2
    done = [p.stats["refreshes"] + p.stats["skipped"] for p in panels]
    SCHEDULE.step(time.monotonic() + 10)
    after = [p.stats["refreshes"] + p.stats["skipped"] for p in panels]
    assert after[:3] == done[:3] and all(a > d for a, d in zip(after[3:], done[3:], strict=True))
    for p in panels:
        p.close()
    end = time.monotonic() + 5
    while SCHEDULE.threads() and time.monotonic() < end:
        time.sleep(0.01)
    assert SCHEDULE.scheduled() == 0 and SCHEDULE.threads() == 0


def test_a_cleared_output_takes_the_panel_off_the_timer(stepped) -> None:
    s, _clock, _ = _stepped(stepped, 1)
    mon = GPUMonitor(sampler=s)
    show(mon)  # what the front end's view sends when it shows the panel
    assert SCHEDULE.has(mon)
    show(mon, visible=False)  # ... and when its output is cleared (the view goes)
    assert not SCHEDULE.has(mon) and mon.running  # started still: a new view resumes it
    show(mon)
    assert SCHEDULE.has(mon)


def test_stopped_panels_do_not_follow_a_replaced_sampler() -> None:
    live = GPUMonitor(source="sim", interval=0.5)
    stopped = GPUMonitor(source="sim", interval=0.5)
    first = live.sampler
    stopped.stop()
    session.ensure_sampler("sim", 0.25)
    assert live.sampler is session.shared_sampler() and live.sampler is not first
    assert stopped.sampler is not session.shared_sampler()  # not rebuilt


def test_a_failing_memory_read_shows_failed_and_counts_in_the_header(stepped) -> None:
    s, clock, sim = _stepped(stepped, 2)
    _advance(s, clock, 3.0)
    mon = GPUMonitor(sampler=s, start=False, metrics="mem")
    mon.refresh(force=True, now=clock.t)
    assert "GiB" in _texts(mon) and "failed" not in _texts(mon)
    sim.inject_error("nvmlDeviceGetMemoryInfo", 999)
    _advance(s, clock, 3.0)
    mon.refresh(force=True, now=clock.t)
    shown = _texts(mon)
    assert "failed" in shown or "stale" in shown
    assert "read(s) failed" in shown
    status = s.status()
    assert f"{status.errors} read(s) failed" in shown


def test_24_hours_keep_the_panel_bounded(monkeypatch, stepped) -> None:
    from nbgpu.widgets.spark import SparkSet

    handed: list[int] = []  # rows each refresh hands to the sparklines: the new ones only
    add_rows = SparkSet.add_rows

    def counted(self, trace, t, v, now, span_s):
        handed.append(len(t))
        return add_rows(self, trace, t, v, now, span_s)

    monkeypatch.setattr(SparkSet, "add_rows", counted)
    s, clock, _ = _stepped(stepped, 8)
    mon = GPUMonitor(sampler=s, start=False)
    held, costs = [], []
    for _hour in range(24):
        _advance(s, clock, 60.0, dt=1.0)  # a minute of ticks an hour keeps the test quick
        clock.t += 3540.0
        s.step(clock.t)
        for _ in range(3):
            clock.t += 1.0
            s.step(clock.t)
            c0 = time.thread_time()
            mon.refresh(now=clock.t)
            costs.append(time.thread_time() - c0)
        held.append(mon.held())
    traces = held[-1]["traces"]
    print(f"24 h, 8 GPUs: held {held[0]} -> {held[-1]}; refresh CPU first hour "
          f"{1000 * np.median(costs[:3]):.1f} ms, last {1000 * np.median(costs[-3:]):.1f} ms; "
          f"store {s.store.nbytes() / 2**20:.1f} MiB")
    assert all(h["buckets"] <= traces * (BUCKETS + 2) for h in held)
    assert len({h["widgets"] for h in held}) == 1
    # The last hours' refreshes hand over about what the first hours' did (the rows since the
    # refresh before), not the history behind them.
    assert len(handed) == 24 * 3 and max(handed[-6:]) <= 2 * max(handed[:6]), handed
