"""The panel's refresh path: what it computes only when needed, and its packed forms equal the plain ones."""

from __future__ import annotations

import math
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

from conftest_panel import parts
from nbgpu.sources.base import Device
from nbgpu.widgets.panel_draw import INSET, pad_rows
from nbgpu.widgets.spark import SparkSet
from nbgpu.widgets.text import band_scale
from spark_oracle import points_of_all, points_packed, update


def _gpu(**kw) -> Device:
    return Device(0, "GPU", mem_total_bytes=80 * 2**30, power_limit_w=700.0, **kw)


def test_band_scale_uses_the_limit_without_looking_at_the_values() -> None:
    gaps = np.full(5, np.nan)  # nanmax of these warns "All-NaN slice"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert band_scale("power_w", _gpu(), {"power_limit_w": 650.0}, {}, gaps) == 650.0
        assert band_scale("power_w", _gpu(), {}, {}, gaps) == 700.0
        assert band_scale("util_pct", _gpu(), {}, {}, gaps) == 100.0
        assert band_scale("mem_used_bytes", _gpu(), {}, {}, gaps) == 80 * 2**30
    no_limit = Device(0, "GPU")
    assert band_scale("power_w", no_limit, {}, {}, np.array([3.0, np.nan, 9.0])) == 9.0
    assert band_scale("sm_clock_mhz", no_limit, {}, {}, np.array([1.0, 1980.0])) == 1980.0
    assert band_scale("sm_clock_mhz", no_limit, {}, {}, np.empty(0)) == 1.0
    assert band_scale("proc_cpu_pct", no_limit, {}, {}, gaps) >= 100.0


@pytest.mark.parametrize("gap_s", [0.5, 3.0])
def test_packed_points_and_packing_equal_the_per_trace_forms(gap_s: float) -> None:
    rng = np.random.default_rng(1)
    now, span, traces = 1000.0, 60.0, 5
    reads = []
    for i in range(traces):
        n = [0, 3, 400, 2000, 50][i]
        t = np.sort(rng.uniform(now - 70, now + 0.2, n))
        reads.append((t, rng.random(n) * 100))
    sset = SparkSet(traces, span / 38)
    keep = [(t[t >= sset.start(now, span)], v[t >= sset.start(now, span)]) for t, v in reads]
    trace, b = update(sset, keep, now, span)
    per_trace = points_of_all(trace, b, traces, now, span, gap_s)
    lengths, x, v = points_packed(trace, b, traces, now, span, gap_s)
    # The panel reads the points straight from the kept grid: the same as from the buckets.
    first, last = math.floor((now - span) / sset.width_s), math.floor(now / sset.width_s)
    direct = sset.points(first, last, now, span, gap_s)
    for got, want in zip(direct, (lengths, x, v), strict=True):
        np.testing.assert_array_equal(got, want)
    assert list(lengths) == [len(px) for px, _ in per_trace]
    np.testing.assert_array_equal(x, np.concatenate([px for px, _ in per_trace]))
    np.testing.assert_array_equal(v, np.concatenate([pv for _, pv in per_trace]))


def test_packing_nothing_gives_one_empty_row() -> None:
    x2, y2 = pad_rows(np.zeros(0, np.int64), np.empty(0), np.empty(0), np.zeros(0, np.int64),
                      np.empty(0), 3, 60.0)
    np.testing.assert_array_equal(x2, np.full((1, 2), -60.0, np.float32))
    assert y2.shape == (1, 2) and np.isnan(y2).all()


def test_packed_rows_are_each_row_placed_in_its_band_then_padded() -> None:
    rng = np.random.default_rng(4)
    lengths = np.array([3, 0, 7, 1, 5])
    x = -rng.random(lengths.sum()) * 60.0
    v = np.where(rng.random(lengths.sum()) < 0.2, np.nan, rng.normal(40.0, 30.0, lengths.sum()))
    bands, scales, bands_n = np.array([0, 0, 1, 2, 3]), [100.0, 50.0, np.inf, -1.0, 80.0], 4
    x2, y2 = pad_rows(lengths, x, v, bands, np.array(scales), bands_n, 60.0)
    assert x2.dtype == y2.dtype == np.float32
    width, lo = 7, 0
    for r, n in enumerate(lengths):
        if n == 0:
            np.testing.assert_array_equal(x2[r], np.full(width, -60.0, np.float32))
            assert np.isnan(y2[r]).all()
            continue
        scale = scales[r] if np.isfinite(scales[r]) and scales[r] > 0 else 1.0
        y = (bands_n - 1 - bands[r] + INSET) + (1 - 2 * INSET) * np.clip(v[lo:lo + n] / scale, 0.0, 1.0)
        pad = width - n
        np.testing.assert_array_equal(x2[r], np.r_[x[lo:lo + n], [x[lo + n - 1]] * pad].astype(np.float32))
        np.testing.assert_array_equal(y2[r], np.r_[y, [y[-1]] * pad].astype(np.float32))
        lo += n


def test_a_new_power_limit_is_drawn_on_at_once() -> None:
    """The panel keeps its bands' scales between refreshes; a card's new limit still rescales."""
    from nbgpu import Sampler, SimulatedGPUs
    from nbgpu.widgets.monitor import GPUMonitor

    clock = SimpleNamespace(t=1.7e9)
    now = lambda: clock.t  # noqa: E731
    sim = SimulatedGPUs(2, seed=1, clock=now)
    s = Sampler(sim, interval=0.5, clock=now, host=False)
    kept = GPUMonitor(sampler=s, metrics="power", window_s=30, start=False)
    try:
        s.step(clock.t)
        for k in range(20):
            if k == 12:
                sim.power_limit_w = 350.0
            end = clock.t + 1.0
            while clock.t < end:
                clock.t = min(max(s.next_wake(), clock.t + 1e-3), end)
                s.step(clock.t)
            kept.refresh(force=True, now=clock.t)
        assert {r["power_limit_w"] for r in s.latest()} == {350.0}
        fresh = GPUMonitor(sampler=s, metrics="power", window_s=30, start=False)
        fresh.refresh(force=True, now=clock.t)
        np.testing.assert_array_equal(parts(kept).lines.y, parts(fresh).lines.y)
        fresh.close()
    finally:
        kept.close()
        s.stop()


def test_an_open_panel_keeps_utilisation_drained_every_5_s_and_a_closed_one_stops_asking() -> None:
    """The panel's refresh asks for the newest values, so the sampler drains live for it."""
    from nbgpu import Sampler, SimulatedGPUs
    from nbgpu.widgets.monitor import GPUMonitor

    clock = SimpleNamespace(t=1.7e9)
    now = lambda: clock.t  # noqa: E731
    sim = SimulatedGPUs(1, seed=1, clock=now)
    util_drains: list[float] = []
    original = sim.nvmlDeviceGetSamples

    def counted(handle, kind, since):
        if kind == 1:  # utilisation
            util_drains.append(clock.t)
        return original(handle, kind, since)

    sim.nvmlDeviceGetSamples = counted
    s = Sampler(sim, clock=now, host=False, diagnostics=False)
    panel = GPUMonitor(sampler=s, window_s=30, start=False)

    def seconds(n: int, refreshing: bool) -> None:
        for _ in range(n):
            end = clock.t + 1.0
            while clock.t < end:
                clock.t = min(max(s.next_wake(), clock.t + 1e-3), end)
                s.step(clock.t)
            if refreshing:
                panel.refresh(force=True, now=clock.t)

    try:
        s.step(clock.t)
        seconds(10, refreshing=True)
        open_drains = len(util_drains)
        panel.close()
        seconds(6, refreshing=False)  # the 5 s the last ask holds, then nobody watches
        util_drains.clear()
        seconds(20, refreshing=False)
    finally:
        s.stop()
    assert 2 <= open_drains <= 4  # every 5 s while open (and the first)
    assert 2 <= len(util_drains) <= 3  # every 10 s once closed


def test_a_fresh_panel_rereads_its_window_only_when_its_span_steps_up() -> None:
    """While a fresh sampler's history is shorter than the window, the span grows with it; each
    new span means new buckets, so a whole read of the window. It grew every second (a 15 min
    window re-read up to 15 min of every GPU's rows each second for 15 minutes); it grows in
    steps of at most 1.5 times, so the lines always cover at least two thirds of the width."""
    from nbgpu import Sampler, SimulatedGPUs
    from nbgpu.widgets.monitor import GPUMonitor

    clock = SimpleNamespace(t=1.7e9)
    now = lambda: clock.t  # noqa: E731
    s = Sampler(SimulatedGPUs(1, seed=1, clock=now), clock=now, host=False, diagnostics=False)
    whole_reads: list[int] = []
    original = s.store.series_rows

    def spy(pairs, t0=-np.inf, t1=np.inf, coarse=True, since=None):
        rows = original(pairs, t0, t1, coarse, since)
        if since is None:
            whole_reads.append(len(rows[1]))  # (pair of each row, times, values, cursor)
        return rows

    s.store.series_rows = spy
    panel = GPUMonitor(sampler=s, window_s=60, start=False, processes=False)
    spans = []
    try:
        s.step(clock.t)
        started = clock.t
        for _ in range(90):
            end = clock.t + 1.0
            while clock.t < end:
                clock.t = min(max(s.next_wake(), clock.t + 1e-3), end)
                s.step(clock.t)
            panel.refresh(now=clock.t)
            elapsed = clock.t - started
            spans.append(panel.drawn_span_s)
            assert min(60.0, elapsed) <= panel.drawn_span_s <= max(10.0, 1.5 * elapsed) + 1e-9
    finally:
        panel.close()
        s.stop()
    assert spans[-1] == 60.0
    assert len(set(spans)) == len(whole_reads) <= 7  # one whole read per span, no more
