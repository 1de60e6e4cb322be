"""A panel refreshes only while a view of it is on screen (its front end says so).

No view ever shown (no front end), every view out of sight or its tab hidden: no refresh,
no message, no watch of the sampler. Back in view: one refresh catches up.
"""

from __future__ import annotations

import numpy as np
import pytest

import nbgpu
from conftest_panel import show
from nbgpu.sources.simulated import SimulatedGPUs
from nbgpu.widgets import monitor, registry
from nbgpu.widgets.registry import RefreshSchedule


@pytest.fixture
def world(monkeypatch, clock, comm_log):
    """(sampler, clock, schedule, comm log, watch times): one fake clock for the sampler and
    the timer; widgets record what they send."""
    sched = RefreshSchedule(clock=clock, thread=False)
    monkeypatch.setattr(monitor, "SCHEDULE", sched)
    s = nbgpu.Sampler(source=SimulatedGPUs(count=2, clock=clock), interval=0.5, clock=clock)
    watched: list[float] = []
    plain_watch = s.watch
    s.watch = lambda: (watched.append(clock.t), plain_watch())[1]
    yield s, clock, sched, comm_log, watched
    registry.close_all()
    s.stop()


def _panel(s, **kwargs) -> monitor.GPUMonitor:
    """A panel on ``s``; ``s``'s thread, which a panel starts, is stopped again: the test
    steps the sampler itself, on the fake clock."""
    mon = monitor.GPUMonitor(sampler=s, **kwargs)
    s.stop(close=False, timeout_s=30.0)
    assert s.status().state == "stopped"
    return mon


def _live(s, clock, sched, seconds: float) -> int:
    """Step the sampler and the panel timer through ``seconds``; returns the ticks done."""
    done = 0
    end = clock.t + seconds
    while clock.t < end:
        clock.t += 0.25
        s.step(clock.t)
        done += sched.step(clock.t)
    return done


def test_a_panel_no_front_end_shows_does_no_work(world) -> None:
    s, clock, sched, log, watched = world
    _live(s, clock, sched, 1.0)
    mon = _panel(s, refresh_s=0.5)
    log.clear()
    assert _live(s, clock, sched, 20.0) == 0
    assert log.sent == [] and watched == [] and sched.scheduled() == 0
    assert mon.stats == {"refreshes": 0, "skipped": 0, "errors": 0}
    assert mon.running and not mon.on_screen  # it would refresh if shown


def test_refreshes_stop_out_of_view_and_one_catches_up_back_in_view(world) -> None:
    s, clock, sched, log, watched = world
    _live(s, clock, sched, 1.0)
    mon = _panel(s, refresh_s=0.5)
    show(mon)
    assert mon.on_screen and mon.views.views_visible == 1
    _live(s, clock, sched, 3.0)
    assert mon.stats["refreshes"] >= 5 and log.updates() and watched
    show(mon, visible=False)  # scrolled out of view, or its tab hidden
    assert not mon.on_screen and mon.views.views_visible == 0
    log.clear()
    del watched[:]
    done = dict(mon.stats)
    assert _live(s, clock, sched, 30.0) == 0
    assert log.sent == [] and watched == [] and mon.stats == done
    show(mon)
    assert sched.step(clock.t) == 1 and mon.stats["refreshes"] == done["refreshes"] + 1
    # that one refresh drew what a panel made now draws at once
    fresh = monitor.GPUMonitor(sampler=s, refresh_s=0.5, start=False)
    fresh.refresh(force=True)
    for a, b in zip(_lines(mon), _lines(fresh), strict=True):
        assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


def _lines(mon) -> tuple[np.ndarray, np.ndarray]:
    """The x and y of the panel's sparklines (the figure's second mark), as sent."""
    figure = mon.children[1].children[0]
    lines = figure.marks[1]
    return np.asarray(lines.x), np.asarray(lines.y)


def test_views_are_counted_across_views(world) -> None:
    s, clock, sched, _log, _watched = world
    _live(s, clock, sched, 1.0)
    mon = _panel(s, refresh_s=0.5)
    show(mon, view="a")
    show(mon, view="b")
    show(mon, visible=False, view="a")
    assert mon.on_screen and sched.scheduled() == 1  # b still shows it
    show(mon, visible=False, view="b")
    assert not mon.on_screen and sched.scheduled() == 0
    show(mon, view="b")
    mon.stop()  # a stopped panel leaves the timer whatever its views say
    assert sched.scheduled() == 0 and not mon.running


def test_a_panel_started_while_on_screen_is_drawn_at_once(world) -> None:
    s, clock, sched, _log, _watched = world
    _live(s, clock, sched, 1.0)
    mon = _panel(s, refresh_s=0.5, start=False)
    show(mon)
    assert sched.scheduled() == 0  # shown, but not started
    mon.start()
    assert sched.step(clock.t) == 1 and mon.stats["refreshes"] == 1


def test_a_long_window_refreshes_at_the_rate_its_pixels_move(world) -> None:
    """A line's bucket (2 pixels) is 1.6 s of a 1 min window and 24 s of a 15 min one: the
    default refresh follows it (2 s to 5 s, so the values stay current); a refresh_s given is kept."""
    s, clock, sched, _log, _watched = world
    _live(s, clock, sched, 1.0)
    short = _panel(s, window_s=60)
    long = _panel(s, window_s=900)
    given = _panel(s, window_s=900, refresh_s=1.0)
    for mon in (short, long, given):
        show(mon)
    _live(s, clock, sched, 60.0)
    ticks = {name: mon.stats["refreshes"] + mon.stats["skipped"]
             for name, mon in (("short", short), ("long", long), ("given", given))}
    assert 28 <= ticks["short"] <= 31 and 55 <= ticks["given"] <= 61, ticks
    assert 11 <= ticks["long"] <= 13, ticks
    long.set_window(30)
    assert long.refresh_s == 2.0 and given.refresh_s == 1.0
    long.set_window(120)
    assert long.refresh_s == pytest.approx(120 / 38)
