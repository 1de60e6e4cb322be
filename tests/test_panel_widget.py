"""GPUMonitor without a browser: what a refresh sends, when it skips, and how it shows state."""

from __future__ import annotations

import queue
import subprocess
import sys
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from conftest_panel import parts, row_titles, show
from nbgpu import Sampler, session
from nbgpu.errors import BadArgumentError
from nbgpu.sources.base import HostOnlySource
from nbgpu.widgets import registry
from nbgpu.widgets.monitor import GPUMonitor
from nbgpu.widgets.panel_draw import BUCKETS, COLUMN_PX, INSET, SPARK_PX, pad_rows, spaced_labels
from nbgpu.widgets.panel_draw import rules as mark_rules
from nbgpu.widgets.spark import SparkSet
from spark_oracle import points_of_all, update


@pytest.fixture(autouse=True)
def _clean():
    yield
    registry.close_all()
    session.reset()


@pytest.fixture
def make(stepped, clock, comm_log):
    """``make(count, interval, ticks, start, source) -> (sampler, clock)``: a sampler on the fake
    clock shared with its simulated GPUs, ``ticks`` intervals stepped by hand; its panels' widgets
    record what they send (``comm_log``).

    ``source`` replaces the GPUs (one on ``clock``, if it reads time).

    ``start``: its thread runs too (a panel says "sampler stopped" of one without), at the
    fake time the steps left; it has stepped there, so it adds nothing until the test moves
    the clock (``clock.advance``).
    """
    def make(count: int = 2, interval: float = 0.05, ticks: int = 4, start: bool = False,
             source: object = None) -> tuple[Sampler, object]:
        s = stepped(source, count, interval=interval)
        clock.run(s, ticks * interval)
        if start:
            s.start()
            clock.settle(s)
        return s, clock

    return make


def test_import_nbgpu_does_not_import_widgets() -> None:
    code = ("import sys, nbgpu; assert 'GPUMonitor' in nbgpu.__all__; "
            "bad = [m for m in ('ipywidgets', 'bqplot', 'IPython') if m in sys.modules]; "
            "assert not bad, bad; nbgpu.GPUMonitor; assert 'bqplot' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _rows(t: np.ndarray, v: np.ndarray, t0: float, t1: float):
    keep = (t >= t0) & (t <= t1)
    return t[keep], v[keep]


def _line(t: np.ndarray, v: np.ndarray, now: float, span: float, width: float, gap_s: float = 3.0):
    sset = SparkSet(1, width)
    trace, b = update(sset, [_rows(t, v, sset.start(now, span), now)], now, span)
    return points_of_all(trace, b, 1, now, span, gap_s)[0]


def test_pack_decimates_and_keeps_fixed_scales() -> None:
    now = 1000.0
    t = np.linspace(now - 60, now, 30_000)
    v = np.where(np.arange(len(t)) % 2, 100.0, 0.0)
    x0, v0 = _line(t, v, now, 60, 60 / 40)
    x1, v1 = _line(np.linspace(now - 5, now, 10), np.full(10, 50.0), now, 60, 1.5)
    traces = [(0, x0, v0, 100.0), (1, x1, v1, 100.0), (2, np.empty(0), np.empty(0), 100.0),
              (1, np.array([-3.0, -2, -1]), np.array([250.0, -5, 1]), 100.0)]
    band, tx, tv, scale = zip(*traces, strict=True)
    x, y = pad_rows(np.array([len(a) for a in tx]), np.concatenate(tx), np.concatenate(tv), np.array(band),
                    scale, bands=3, span_s=60)
    assert x.dtype == np.float32 and x.shape == y.shape and x.shape[0] == 4
    assert x.shape[1] <= 2 * 41 + 2
    assert np.nanmax(x) <= 0 and np.nanmin(x) >= -60
    top, bottom = 2 + 1 - INSET, 2 + INSET  # band of row 0 of 3 is [2, 3]
    assert np.isclose(np.nanmax(y[0]), top) and np.isclose(np.nanmin(y[0]), bottom)
    assert np.allclose(y[1], 1 + INSET + (1 - 2 * INSET) * 0.5)
    assert np.isnan(y[2]).all()
    assert np.isclose(y[3, 0], 1 + 1 - INSET) and np.isclose(y[3, 1], 1 + INSET)  # clipped


def test_gaps_show_as_nan() -> None:
    t = np.array([0.0, 1, 2, 10, 11]) + 100.0
    x, v = _line(t, np.ones(5), 111.0, 20, 0.5)
    assert np.isnan(v).sum() == 1 and np.all(np.diff(x) >= 0)
    assert 102 - 111 < x[np.isnan(v)][0] < 110 - 111


def test_incremental_buckets_equal_a_fresh_reduction() -> None:
    rng = np.random.default_rng(3)
    traces = [np.sort(rng.random(n) * 300.0) + 1000.0 for n in (20_000, 3_000, 0)]
    values = [rng.random(len(t)) * 100 for t in traces]
    kept = SparkSet(3, 60 / BUCKETS)
    given = -np.inf
    for now in np.arange(1100.0, 1300.0, 1.0):  # each refresh hands over the new rows only
        new = [(t[(t > given) & (t <= now)], v[(t > given) & (t <= now)])
               for t, v in zip(traces, values, strict=True)]
        inc = update(kept, new, now, 60)
        given = now
    fresh_set = SparkSet(3, 60 / BUCKETS)
    fresh = update(fresh_set, [_rows(t, v, fresh_set.start(now, 60), now)
                               for t, v in zip(traces, values, strict=True)], now, 60)
    np.testing.assert_array_equal(inc[0], fresh[0])
    for name in ("index", "count", "tmin", "vmin", "tmax", "vmax"):
        np.testing.assert_array_equal(getattr(inc[1], name), getattr(fresh[1], name))
    assert kept.held() <= 3 * (BUCKETS + 2)


def test_mark_labels_never_overlap() -> None:
    xs = np.array([-50.0, -20.0, -19.0, -2.0], dtype=np.float32)  # px 12.7, 50.7, 52, 73.5
    x, labels = spaced_labels(xs, ["a", "b", "c", "d"], window_s=60, width_px=76, min_gap_px=20)
    assert labels == ["c", "d"] and list(x) == [-19, -2]  # "b" too close to "c", "a" to the edge
    x, labels = spaced_labels(xs, ["a", "b", "c", "d"], window_s=60, width_px=76, min_gap_px=40)
    assert labels == ["d"]
    assert spaced_labels(np.zeros(1, np.float32), [], 60, 76, 20)[1] == []


def test_refresh_sends_one_message_per_widget_and_skips_when_unchanged(make, comm_log) -> None:
    s, clock = make()
    mon = GPUMonitor(sampler=s, start=False)
    comm_log.clear()
    assert mon.refresh(force=True, now=clock.t)
    per_widget = Counter(m.comm_id for m in comm_log.updates())
    assert per_widget and max(per_widget.values()) == 1
    assert parts(mon).lines.x.shape[1] <= 2 * BUCKETS + 4
    s.stop()
    mon.refresh(now=clock.t)
    n = len(comm_log.updates())
    assert mon.refresh(now=clock.t) is False and len(comm_log.updates()) == n
    assert mon.stats["skipped"] == 1


def test_long_windows_redraw_lines_only_when_a_pixel_has_passed(make, comm_log) -> None:
    """One refresh sends a line only once the window's pixel (about 24 s of 3600 s) has passed."""
    s, clock = make()
    mon = GPUMonitor(sampler=s, start=False, window_s=3600)
    mon.refresh(now=clock.t)
    lines, values = parts(mon).lines, parts(mon).values  # memory moves every tick
    n_lines, n_values = len(comm_log.updates(lines)), len(comm_log.updates(values))
    clock.run(s, 4 * s.interval)
    assert mon.refresh(now=clock.t)  # 3600 s over 76 px: about 24 s a pixel, so only the values move
    assert len(comm_log.updates(lines)) == n_lines
    assert len(comm_log.updates(values)) == n_values + 1
    clock.run(s, 3600 / (2 * SPARK_PX))
    assert mon.refresh(now=clock.t)  # a pixel has passed
    assert len(comm_log.updates(lines)) == n_lines + 1
    mon.set_window(60)  # the sampler is younger than both windows: the same picture, not resent
    assert len(comm_log.updates(lines)) == n_lines + 1
    s.started_at -= 1000
    mon.set_window(300)  # an older sampler fills either window: a new picture at once
    assert len(comm_log.updates(lines)) == n_lines + 2


def test_message_count_does_not_grow_with_gpus_or_sample_rate(make, comm_log) -> None:
    counts = []
    for count, interval in ((1, 0.5), (8, 0.02)):
        s, clock = make(count, interval, ticks=3)
        mon = GPUMonitor(sampler=s, start=False, metrics="util,mem,power,temp")
        n = len(comm_log.updates())
        mon.refresh(force=True, now=clock.t)
        counts.append(len(comm_log.updates()) - n)
        mon.close()
        s.stop()
    assert counts[0] == counts[1]


def test_a_refresh_sends_two_messages_whatever_the_number_of_columns(make, comm_log) -> None:
    """Every column's lines are one mark and every column's values one widget: a steady refresh
    sends the lines and the values, one message each, for one column as for eleven."""
    from nbgpu.widgets.columns import COLUMNS

    sent = []
    for metrics in ("util", ",".join(COLUMNS)):
        s, clock = make(8, 0.1, ticks=3)
        mon = GPUMonitor(sampler=s, start=False, metrics=metrics, processes=False)
        mon.refresh(force=True, now=clock.t)
        clock.run(s, 1.0)
        n = len(comm_log.updates())
        assert mon.refresh(now=clock.t)
        sent.append(len(comm_log.updates()) - n)
        mon.close()
        s.stop()
    assert sent == [2, 2]


def test_each_columns_lines_and_mark_rules_lie_in_its_own_pixels(make) -> None:
    """One figure holds every column: column c's lines stay inside its sparkline's pixels
    (``c * COLUMN_PX`` to ``+ SPARK_PX``), right edge now, and a mark's rule stands at the
    same place in every column."""
    from nbgpu.widgets.panel_draw import COLUMN_PX

    s, clock = make(2, 0.1, ticks=30)
    mon = GPUMonitor(sampler=s, start=False, metrics="util,mem,power", processes=False)
    s.mark("here")
    clock.run(s, 2.0)
    mon.refresh(force=True, now=clock.t)
    grid = parts(mon)
    x = np.asarray(grid.lines.x, float)
    lefts = set()
    for row in x:
        left = COLUMN_PX * (row.min() // COLUMN_PX)
        assert row.max() <= left + SPARK_PX + 1e-3, (left, row)
        lefts.add(left)
    assert sorted(lefts) == [0, COLUMN_PX, 2 * COLUMN_PX]
    assert np.isclose(x.max(), 2 * COLUMN_PX + SPARK_PX, atol=SPARK_PX * 0.2 / mon.drawn_span_s)
    rule_x = np.asarray(grid.rules.x, float)[:, 0]
    assert len(rule_x) == 3 and np.allclose(rule_x - [0, COLUMN_PX, 2 * COLUMN_PX], rule_x[0])
    assert 0 < rule_x[0] < SPARK_PX
    mon.close()
    s.stop()


def test_labels_values_and_states(make, stepped) -> None:
    """A running sampler's panel: values, then a lost GPU and a mark, then the sampler stopped."""
    sim = stepped.gpus(2)
    s, clock = make(source=sim, start=True)
    mon = GPUMonitor(sampler=s, start=False)
    mon.refresh(force=True, now=clock.t)
    assert "SIMULATED" in parts(mon).header.value
    util = parts(mon).values.value
    assert "%" in util and any(ch.isdigit() for ch in util)
    assert "GPU 0" in parts(mon).values.value and "host" in parts(mon).values.value
    assert "LOST" not in parts(mon).values.value and "sampler stopped" not in parts(mon).header.value
    sim.lose_gpu(1)
    clock.advance(s, s.interval)  # the thread's next read finds it gone
    assert list(s.lost) == [1]
    mon.refresh(now=clock.t)
    assert "LOST" in parts(mon).values.value and "Lost GPU" in parts(mon).header.value
    s.mark("epoch 1")
    mon.refresh(now=clock.t)
    first = parts(mon)
    assert first.labels.visible and list(first.labels.text) == ["epoch 1"]
    assert not np.isnan(first.rules.x).all()
    s.stop()
    mon.refresh(now=clock.t)
    assert "sampler stopped" in parts(mon).header.value


def test_host_only_panel_says_why(monkeypatch, make) -> None:
    import itertools

    from nbgpu.sources import host

    # The machine's CPU counters as they move between ticks a fake 50 ms apart (a test's
    # ticks come microseconds apart, when the real ones have not moved: "not measured").
    counters = itertools.count()
    monkeypatch.setattr(host, "_stat_cpu_s", lambda _head: (next(counters) * 0.02, next(counters) * 0.05))
    s, clock = make(ticks=2, source=HostOnlySource(
        "NVML is not available (test); or use source='sim' for simulated GPUs."))
    mon = GPUMonitor(sampler=s, start=False)
    mon.refresh(force=True, now=clock.t)
    assert "No GPU visible: NVML is not available (test)." in parts(mon).header.value
    assert "--source sim" in parts(mon).header.value and "SIMULATED" not in parts(mon).header.value
    assert row_titles(mon) == ["host"] and "%" in parts(mon).values.value


def test_alert_badges_from_the_sampler(make) -> None:
    s, clock = make(ticks=2)
    alert = SimpleNamespace(rule="input_bound", severity="warning", gpu=0, start=1.0, end=None,
                            message="GPU 0 waits for input.", suggestion="Use more loader workers.")
    s.alert_list = lambda since_s=None: [alert, SimpleNamespace(**{**alert.__dict__, "gpu": 1, "end": 2.0})]
    mon = GPUMonitor(sampler=s, start=False)
    mon.refresh(force=True, now=clock.t)
    assert parts(mon).values.value.count("input_bound") == 1
    assert "Use more loader workers." in parts(mon).values.value


def test_a_refresh_copies_only_the_alerts_still_on(monkeypatch, make) -> None:
    """A long session keeps up to 1,000 ended alerts; a refresh, once a second, must not copy
    them all to find the few still on (its cost would grow with the session)."""
    import dataclasses

    from nbgpu.diagnostics import alerts as alerts_module

    s, clock = make(ticks=2)
    episodes = s.diagnostics._episodes
    ended = [alerts_module.Alert("idle", "info", 0, float(i), i + 0.5, "idle", "", {})
             for i in range(500)]
    on = alerts_module.Alert("input_bound", "warning", 1, 600.0, None, "GPU 1 waits.", "", {})
    episodes.alerts.extend([*ended, on])
    episodes._open[("input_bound", 1)] = on
    copies = []
    real_replace = dataclasses.replace
    monkeypatch.setattr(alerts_module.dataclasses, "replace",
                        lambda a, **kw: copies.append(a) or real_replace(a, **kw))
    mon = GPUMonitor(sampler=s, start=False)
    mon.refresh(force=True, now=clock.t)
    assert copies == [on]
    assert parts(mon).values.value.count("input_bound") == 1 and "⚠ idle" not in parts(mon).values.value
    assert len(s.alert_list()) == 501  # everyone else still gets the whole history


def _thinned(s, now: float, span_s: float) -> list:
    """The marks of the span that get a rule: the newest of those closer than 3 pixels."""
    _x, _y, labels = mark_rules(list(s.timeline.marks()), 1.0, now, span_s, SPARK_PX)
    return labels


def test_a_refresh_reads_only_the_new_events_for_its_mark_rules(monkeypatch, make) -> None:
    """``nbgpu.track()`` marks every iteration, and the store keeps 10,000 events: a refresh
    reads only the events added since the last one, and still draws every mark in its window
    (one stamped in the past after newer ones too), and all of them again for a longer window."""
    s, clock = make(2, 0.1, ticks=30)
    s.remove_listener(s.diagnostics)  # the rules follow the events too: only the panel here
    mon = GPUMonitor(sampler=s, start=False, processes=False, window_s=60)
    for i in range(2000):  # an hour of marks, all but the last minute's outside the window
        s.mark(f"step {i}", t=clock.t - 3600 + i * 1.8)
    clock.run(s, 1.0)
    mon.refresh(force=True, now=clock.t)
    read = []
    since = s.store.events_since
    monkeypatch.setattr(s.store, "events_since", lambda seq=0: read.append(len(r := since(seq))) or r)
    s.mark("late", t=clock.t - 5)  # newer events came before it
    clock.run(s, 1.0)
    mon.refresh(now=clock.t)
    assert read == [1]
    rules = np.asarray(parts(mon).rules.x, float)[:, 0]
    columns = len({row.min() // COLUMN_PX for row in np.asarray(parts(mon).lines.x, float)})
    in_window = _thinned(s, clock.t, mon.drawn_span_s)  # one rule per 3 pixels at most
    assert len(rules) == len(in_window) * columns and len(in_window) > 2
    late_px = SPARK_PX * (1 - (5 + 1.0) / mon.drawn_span_s)  # drawn 1 s later
    assert np.isclose(rules, late_px, atol=0.05).any(), (rules, late_px)
    s.started_at -= 7200
    mon.set_window(3600)
    rules = np.asarray(parts(mon).rules.x, float)[:, 0]
    in_window = _thinned(s, clock.t, mon.drawn_span_s)
    assert mon.drawn_span_s == 3600 and 20 <= len(in_window) <= SPARK_PX / 3 + 1
    assert len(rules) == len(in_window) * columns
    mon.close()
    s.stop()


def test_a_failing_view_never_stops_the_sampler(make) -> None:
    """A view that fails every draw is counted and shown; the sampler and the panel's timer go on.

    Both threads run: the panel's own timer ticks it, the sampler's thread steps on a fake clock.
    A tick draws only when the store has changed, so each step the test lets happen is one
    error; the test waits for the ticks that report them, not for time to pass.
    """
    s, clock = make(start=True)
    mon = GPUMonitor(sampler=s, refresh_s=0.25, start=False)
    ticked: queue.Queue[tuple[int, bool | float]] = queue.Queue()

    def broken(*args):
        raise RuntimeError("view broke")

    def tick() -> bool | float:
        keep = GPUMonitor.tick(mon)
        ticked.put((mon.stats["errors"], keep))
        return keep

    def wait_for_errors(n: int) -> None:
        """Until a tick has counted ``n`` errors; no tick may take the panel off its timer."""
        counted = 0
        while counted < n:
            counted, keep = ticked.get(timeout=clock.SETTLE_TIMEOUT_S)
            assert keep is not False, f"the panel left its timer after {counted} error(s)"

    s.latest, mon.tick = broken, tick  # every draw fails: it reads the newest values first
    show(mon)
    mon.start()
    ticks = s.ticks
    wait_for_errors(1)  # the first tick draws what the sampler has read
    clock.advance(s, s.interval)
    wait_for_errors(2)
    assert s.running and s.ticks == ticks + 1 and mon.running
    assert mon.stats["errors"] >= 2 and "view broke" in mon.last_error
    mon.stop()
    assert not mon.running and "panel stopped" in parts(mon).header.value


def test_pause_window_close(make) -> None:
    """The panel on its own timer: paused it draws nothing, a window change redraws, close ends it.

    A redraw on a change reads the sampler's clock (the fake one here), as its readings do.
    """
    s, clock = make(start=True)
    mon = GPUMonitor(sampler=s, refresh_s=0.25)
    assert mon.running and mon in registry.panels()
    mon.pause()
    ticks = s.ticks
    clock.advance(s, s.interval)
    assert s.ticks == ticks + 1  # sampling goes on
    assert mon.refresh() is False and "paused" in parts(mon).header.value
    mon.pause(False)
    mon.set_window(300)
    assert mon.window_s == 300 and mon.drawn_span_s == 10  # a fresh sampler: the span fills first
    s.started_at -= 1000
    mon.refresh(force=True)
    assert mon.drawn_span_s == 300
    with pytest.raises(BadArgumentError):
        mon.set_window(1)
    mon.close()
    assert not mon.running and mon not in registry.panels()
    assert s.running  # the sampler is not the panel's to stop


def test_shared_panel_follows_a_replaced_sampler() -> None:
    mon = GPUMonitor(source="sim", interval=0.5, start=False)
    first = mon.sampler
    assert first is session.shared_sampler()
    session.ensure_sampler("sim", 0.25)
    assert mon.sampler is session.shared_sampler() and mon.sampler is not first
    assert not first.running


def test_bad_arguments(make) -> None:
    for kw in ({"window_s": 0}, {"refresh_s": 0.1}, {"metrics": "util,bogus"}):
        with pytest.raises(BadArgumentError):
            GPUMonitor(sampler=make()[0], start=False, **kw)
    with pytest.raises(BadArgumentError, match="GPU index 5 is out of range"):
        GPUMonitor(sampler=make()[0], gpus="0,5", start=False)
    with pytest.raises(BadArgumentError):
        GPUMonitor(source="sim", sampler=make()[0], start=False)


def test_a_panel_is_ticked_again_soon_until_its_sampler_has_read() -> None:
    from nbgpu.widgets.registry import RefreshSchedule

    class Panel:
        refresh_s = 1.0

        def __init__(self) -> None:
            self.ticks: list[float] = []
            self.ready = False

        def tick(self):
            self.ticks.append(now)
            return True if self.ready else 0.05

    sched, p = RefreshSchedule(clock=lambda: 0.0, thread=False), Panel()
    sched.add(p, 0.0)
    for now in np.arange(0.0, 0.3, 0.01):
        if now >= 0.1:
            p.ready = True
        sched.step(float(now))
    assert p.ticks[:3] == pytest.approx([0.0, 0.05, 0.1]) and len(p.ticks) == 3  # then 1 s later


def test_the_header_is_drawn_again_whenever_its_text_is_not_the_one_drawn(make) -> None:
    """The header is built only when what it says changes, unless its text was changed since."""
    s, clock = make(ticks=2, start=True)
    mon = GPUMonitor(sampler=s, start=False)
    mon.refresh(force=True, now=clock.t)
    drawn = parts(mon).header.value
    assert "panel stopped" in drawn
    parts(mon).header.value = "something else"
    mon.refresh(force=True)
    assert parts(mon).header.value == drawn
    mon.start()
    mon.refresh(force=True)
    assert "live" in parts(mon).header.value and "last values" not in parts(mon).header.value
    mon.stop()
    assert "last values" in parts(mon).header.value
    mon.start()
    mon.refresh(force=True)
    assert "live" in parts(mon).header.value and "last values" not in parts(mon).header.value
    mon.close()


def test_a_refresh_whose_lines_would_not_move_a_pixel_sends_no_lines(make, comm_log) -> None:
    """Issue 30: a redraw of the same picture (forced, no new readings, same time) sends no
    lines and no values; the lines go again once a new reading moves a pixel."""
    s, clock = make()
    mon = GPUMonitor(sampler=s, start=False)
    mon.refresh(force=True, now=clock.t)
    lines, values = parts(mon).lines, parts(mon).values
    n_lines, n_values = len(comm_log.updates(lines)), len(comm_log.updates(values))
    assert mon.refresh(force=True, now=clock.t)
    assert len(comm_log.updates(lines)) == n_lines
    assert len(comm_log.updates(values)) == n_values
    clock.run(s, 4 * s.interval)
    assert mon.refresh(force=True, now=clock.t)
    assert len(comm_log.updates(lines)) == n_lines + 1
