"""GPUMonitor without a browser: what a refresh sends, when it skips, and how it shows state."""

from __future__ import annotations

import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from nbgpu import Sampler, SimulatedGPUs, session
from nbgpu.errors import BadArgumentError
from nbgpu.widgets import registry
from nbgpu.widgets.bands import INSET, pack_points, spaced_labels
from nbgpu.widgets.hostonly import HostOnlySource
from nbgpu.widgets.monitor import BUCKETS, GPUMonitor
from nbgpu.widgets.spark import SparkSet, points_of_all

_mine: list[Sampler] = []


@pytest.fixture(autouse=True)
def _clean():
    yield
    registry.close_all()
    session.reset()
    while _mine:
        _mine.pop().stop()


def _sampler(count: int = 2, interval: float = 0.05, **kw) -> Sampler:
    s = Sampler(SimulatedGPUs(count, **kw), interval=interval).start()
    _mine.append(s)
    return s


def _wait_ticks(s: Sampler, n: int = 4, timeout: float = 5.0) -> None:
    end = time.time() + timeout
    start = s.ticks
    while s.ticks < start + n and time.time() < end:
        time.sleep(0.02)


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
    trace, b = sset.update([_rows(t, v, sset.start(now, span), now)], now, span)
    return points_of_all(trace, b, 1, now, span, gap_s)[0]


def test_pack_decimates_and_keeps_fixed_scales() -> None:
    now = 1000.0
    t = np.linspace(now - 60, now, 30_000)
    v = np.where(np.arange(len(t)) % 2, 100.0, 0.0)
    x0, v0 = _line(t, v, now, 60, 60 / 40)
    x1, v1 = _line(np.linspace(now - 5, now, 10), np.full(10, 50.0), now, 60, 1.5)
    traces = [(0, x0, v0, 100.0), (1, x1, v1, 100.0), (2, np.empty(0), np.empty(0), 100.0),
              (1, np.array([-3.0, -2, -1]), np.array([250.0, -5, 1]), 100.0)]
    x, y = pack_points(traces, bands=3, span_s=60)
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
        inc = kept.update(new, now, 60)
        given = now
    fresh_set = SparkSet(3, 60 / BUCKETS)
    fresh = fresh_set.update([_rows(t, v, fresh_set.start(now, 60), now)
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


def test_refresh_sends_one_message_per_widget_and_skips_when_unchanged() -> None:
    s = _sampler()
    mon = GPUMonitor(sampler=s, start=False)
    _wait_ticks(s)
    before = mon.traffic.snapshot()
    assert mon.refresh(force=True)
    after = mon.traffic.snapshot()
    assert after["messages"] > before["messages"]
    assert max(mon.traffic.per_widget.values()) == 1
    xs = [v.lines.x for v in mon._views]
    assert all(x.shape[1] <= 2 * BUCKETS + 4 for x in xs)
    s.stop()
    mon.refresh()
    n = mon.traffic.messages
    assert mon.refresh() is False and mon.traffic.messages == n
    assert mon.stats["skipped"] >= 1


def test_long_windows_redraw_lines_only_when_a_pixel_has_passed() -> None:
    s = _sampler()
    mon = GPUMonitor(sampler=s, start=False, window_s=3600)
    _wait_ticks(s)
    mon.refresh()
    lines = mon._views[0].lines
    n_lines, n_values = mon.traffic.per_widget[lines.model_id], mon.traffic.per_widget[
        mon._views[0].values.model_id]
    _wait_ticks(s)
    assert mon.refresh()  # 3600 s over 76 px: about 24 s a pixel, so only the values move
    assert mon.traffic.per_widget[lines.model_id] == n_lines
    assert mon.traffic.per_widget[mon._views[0].values.model_id] >= n_values
    mon.set_window(60)
    assert mon.traffic.per_widget[lines.model_id] == n_lines + 1


def test_message_count_does_not_grow_with_gpus_or_sample_rate() -> None:
    counts = []
    for count, interval in ((1, 0.5), (8, 0.02)):
        s = _sampler(count, interval)
        mon = GPUMonitor(sampler=s, start=False, metrics="util,mem,power,temp")
        _wait_ticks(s, 3)
        n = mon.traffic.messages
        mon.refresh(force=True)
        counts.append(mon.traffic.messages - n)
        mon.close()
        s.stop()
    assert counts[0] == counts[1]


def test_labels_values_and_states() -> None:
    sim = SimulatedGPUs(2)
    s = Sampler(sim, interval=0.05).start()
    _mine.append(s)
    mon = GPUMonitor(sampler=s, start=False)
    _wait_ticks(s)
    mon.refresh(force=True)
    assert "SIMULATED" in mon._header.value
    util = mon._views[0].values.value
    assert "%" in util and any(ch.isdigit() for ch in util)
    assert "GPU 0" in mon._labels.value and "host" in mon._labels.value
    sim.lose_gpu(1)
    end = time.time() + 5
    while 1 not in s.lost and time.time() < end:
        time.sleep(0.02)
    mon.refresh()
    assert "LOST" in mon._labels.value and "Lost GPU" in mon._header.value
    s.mark("epoch 1")
    mon.refresh()
    first = mon._views[0]
    assert first.labels.visible and list(first.labels.text) == ["epoch 1"]
    assert not np.isnan(first.rules.x).all()
    s.stop()
    mon.refresh()
    assert "sampler stopped" in mon._header.value


def test_host_only_panel_says_why() -> None:
    s = Sampler(HostOnlySource("NVML is not available (test); or use source='sim' for simulated GPUs."),
                interval=0.05).start()
    _mine.append(s)
    mon = GPUMonitor(sampler=s, start=False)
    _wait_ticks(s, 2)
    mon.refresh(force=True)
    assert "No GPU visible: NVML is not available (test)." in mon._header.value
    assert "--source sim" in mon._header.value and "SIMULATED" not in mon._header.value
    assert len(mon._rows) == 1 and "%" in mon._views[0].values.value


def test_alert_badges_from_the_sampler() -> None:
    s = _sampler()
    alert = SimpleNamespace(rule="input_bound", severity="warning", gpu=0, start=1.0, end=None,
                            message="GPU 0 waits for input.", suggestion="Use more loader workers.")
    s.alert_list = lambda: [alert, SimpleNamespace(**{**alert.__dict__, "gpu": 1, "end": 2.0})]
    mon = GPUMonitor(sampler=s, start=False)
    _wait_ticks(s, 2)
    mon.refresh(force=True)
    assert mon._labels.value.count("input_bound") == 1
    assert "Use more loader workers." in mon._labels.value


def test_a_failing_view_never_stops_the_sampler() -> None:
    s = _sampler()
    mon = GPUMonitor(sampler=s, refresh_s=0.25, start=False)

    def broken(*args):
        raise RuntimeError("view broke")

    mon._draw = broken
    mon.start()
    ticks = s.ticks
    time.sleep(1.0)
    assert s.running and s.ticks > ticks and mon.running
    assert mon.stats["errors"] >= 2 and "view broke" in mon.last_error
    mon.stop()
    assert not mon.running and "panel stopped" in mon._header.value


def test_pause_window_close() -> None:
    s = _sampler()
    mon = GPUMonitor(sampler=s, refresh_s=0.25)
    assert mon.running and mon in registry.panels()
    mon.pause()
    _wait_ticks(s, 2)
    assert mon.refresh() is False and "paused" in mon._header.value
    mon.pause(False)
    mon.set_window(300)
    assert mon.window_s == 300 and mon._sx.min == -10  # a fresh sampler: the span fills first
    s.started_at -= 1000
    mon.refresh(force=True)
    assert mon._sx.min == -300
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


def test_bad_arguments() -> None:
    for kw in ({"window_s": 0}, {"refresh_s": 0.1}, {"metrics": "util,bogus"}):
        with pytest.raises(BadArgumentError):
            GPUMonitor(sampler=_sampler(), start=False, **kw)
    with pytest.raises(BadArgumentError, match="GPU '5'"):
        GPUMonitor(sampler=_sampler(), gpus="0,5", start=False)
    with pytest.raises(BadArgumentError):
        GPUMonitor(source="sim", sampler=_sampler(), start=False)


def test_a_panel_is_ticked_again_soon_until_its_sampler_has_read() -> None:
    from nbgpu.widgets.schedule import RefreshSchedule

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


def test_the_header_is_drawn_again_whenever_its_text_is_not_the_one_drawn() -> None:
    """The header is built only when what it says changes, unless its text was changed since."""
    s = _sampler()
    mon = GPUMonitor(sampler=s, start=False)
    _wait_ticks(s, 2)
    mon.refresh(force=True)
    drawn = mon._header.value
    assert "panel stopped" in drawn
    mon._header.value = "something else"
    mon.refresh(force=True)
    assert mon._header.value == drawn
    mon.start()
    mon.refresh(force=True)
    assert "live" in mon._header.value and "last values" not in mon._header.value
    mon.stop()
    assert "last values" in mon._header.value
    mon.start()
    mon.refresh(force=True)
    assert "live" in mon._header.value and "last values" not in mon._header.value
    mon.close()
