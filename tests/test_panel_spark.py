"""Sparkline buckets kept between refreshes equal a fresh reduction of the whole window."""

from __future__ import annotations

import numpy as np
import pytest

from conftest_panel import parts
from nbgpu.widgets.spark import SparkSet
from spark_oracle import bucket_minmax, points_of_all, update, update_packed

FIELDS = ("index", "count", "first_t", "last_t", "tmin", "vmin", "tmax", "vmax")


def _series(rng: np.random.Generator, start: float, seconds: float, hz: float, gaps: bool):
    t = start + np.sort(rng.random(int(seconds * hz))) * seconds
    if gaps:  # silent stretches of a few buckets to a whole window
        t = t[(np.floor((t - start) / 37.0) % 3 != 1) | (t - start < 20)]
    return t, rng.random(len(t)) * 100


def _packed(series, given: list[int], arrived: list[float], t0: float):
    """Rows of each trace that arrived by now and were not given yet, packed as the store packs.

    ``given`` (rows handed over so far, per trace) is updated: the store's cursor.
    """
    lengths, ts, vs = [], [], []
    for i, ((t, v), at) in enumerate(zip(series, arrived, strict=True)):
        n = int(np.searchsorted(t, at, "right"))
        new_t, new_v = t[given[i]:n], v[given[i]:n]
        given[i] = n
        keep = new_t >= t0
        lengths.append(int(keep.sum()))
        ts.append(new_t[keep])
        vs.append(new_v[keep])
    return np.asarray(lengths, np.int64), np.concatenate(ts), np.concatenate(vs)


def _reference(series, now: float, span: float, width: float):
    """Every bucket of the window from all rows, one reduction: (trace, buckets)."""
    first = int(np.floor((now - span) / width))
    out_trace, out = [], []
    for i, (t, v) in enumerate(series):
        keep = (t >= first * width) & (t <= now)
        b = bucket_minmax(t[keep], v[keep], np.floor(t[keep] / width).astype(np.int64))
        out_trace.append(np.full(len(b), i))
        out.append(b)
    return np.concatenate(out_trace), {f: np.concatenate([getattr(b, f) for b in out]) for f in FIELDS}


@pytest.mark.parametrize("start", [1000.0, 1.7e9])
@pytest.mark.parametrize("span", [60.0, 900.0])
@pytest.mark.parametrize("ties", [False, True])
def test_kept_buckets_equal_a_fresh_reduction_at_every_refresh(start: float, span: float, ties: bool) -> None:
    rng = np.random.default_rng(11)
    width = span / 38
    seconds = 4 * span
    series = [_series(rng, start, seconds, hz, gaps) for hz, gaps in
              ((50.0, False), (5.0, True), (10.0, False), (0.0, False), (5.0, False))]
    if ties:  # a few values only (whole percents, say): the first minimum and maximum in time matter
        series = [(t, np.round(v / 20)) for t, v in series]
    sset = SparkSet(len(series), width)
    given = [0] * len(series)
    step = span / 60
    for k, now in enumerate(np.arange(start + 10.0, start + seconds, step)):
        # 50 Hz drained every 1 s, 2.4 s late; the last trace in 10 s drains (memory bandwidth)
        arrived = [now - 2.4 - (k % 3) * 0.3, now, now, now, np.floor((now - start) / 10) * 10 + start]
        lengths, t, v = _packed(series, given, arrived, sset.start(now, span))
        trace, b = update_packed(sset, lengths, t, v, now, span)
        seen = [(t[t <= at], v[t <= at]) for (t, v), at in zip(series, arrived, strict=True)]
        want_trace, want = _reference(seen, now, span, width)
        np.testing.assert_array_equal(trace, want_trace)
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(b, f), want[f], err_msg=f)
        assert sset.held() <= len(series) * (38 + 2)
        assert not sset.ahead


def test_a_window_made_ready_again_is_the_window_made_afresh() -> None:
    """Refreshes within one bucket and a clock that steps back: skipping the ring's preparation
    for the window prepared last time gives the buckets that preparing it again gives."""
    rng = np.random.default_rng(2)
    span, width = 60.0, 60.0 / 38
    series = [_series(rng, 1000.0, 400.0, hz, gaps) for hz, gaps in ((50.0, False), (5.0, True))]
    kept, afresh = SparkSet(len(series), width), SparkSet(len(series), width)
    given = [0] * len(series)
    nows = [1070.0, 1070.2, 1070.4, 1071.0, 1070.1, 1069.3, 1072.5, 1072.5, 1071.0, 1200.0, 1199.2,
            1199.2, 1260.0, 1321.0, 1320.0, 1250.0, 1330.0]
    newest = -np.inf
    for now in nows:
        newest = max(newest, now)
        lengths, t, v = _packed(series, given, [newest] * len(series), kept.start(now, span))
        afresh._prepared = None  # as if this window had never been made ready
        got = update_packed(kept, lengths, t, v, now, span)
        want = update_packed(afresh, lengths, t, v, now, span)
        np.testing.assert_array_equal(got[0], want[0])
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(got[1], f), getattr(want[1], f), err_msg=f"{f} at {now}")
        assert kept.ahead == afresh.ahead


def test_reads_as_a_list_are_the_packed_reads() -> None:
    rng = np.random.default_rng(5)
    series = [_series(rng, 500.0, 120.0, hz, False) for hz in (20.0, 3.0)]
    a, b = SparkSet(2, 60 / 38), SparkSet(2, 60 / 38)
    given = [0, 0]
    for now in (560.0, 561.0, 575.5, 619.0):
        t0 = a.start(now, 60.0)
        assert t0 == b.start(now, 60.0)
        lengths, t, v = _packed(series, given, [now, now], t0)
        ends = np.cumsum(lengths)
        reads = [(t[e - n:e], v[e - n:e]) for n, e in zip(lengths, ends, strict=True)]
        ta, ba = update(a, reads, now, 60.0)
        tb, bb = update_packed(b, lengths, t, v, now, 60.0)
        np.testing.assert_array_equal(ta, tb)
        for f in FIELDS:
            np.testing.assert_array_equal(getattr(ba, f), getattr(bb, f))


def test_rows_ahead_of_now_ask_for_a_new_set() -> None:
    sset = SparkSet(1, 1.0)
    update_packed(sset, np.array([2]), np.array([99.5, 100.5]), np.array([1.0, 2.0]), 100.0, 38.0)
    assert not sset.ahead  # the next bucket is kept
    update_packed(sset, np.array([1]), np.array([105.0]), np.array([3.0]), 100.2, 38.0)
    assert sset.ahead


def test_no_rows_no_buckets() -> None:
    sset = SparkSet(3, 1.0)
    trace, b = update_packed(sset, np.zeros(3, np.int64), np.empty(0), np.empty(0), 100.0, 38.0)
    assert len(trace) == len(b) == 0 and sset.held() == 0


def test_rows_drained_late_reach_the_panel_lines(stepped) -> None:
    """Memory bandwidth comes in 10 s drains: a kept panel draws what a new one draws."""
    from nbgpu import Sampler, SimulatedGPUs
    from nbgpu.widgets.monitor import GPUMonitor

    clock = stepped.new_clock(1.7e9)
    s = Sampler(SimulatedGPUs(2, seed=4, clock=clock), interval=0.5, clock=clock, host=False)
    kept = GPUMonitor(sampler=s, metrics="membw,util,power", window_s=60, start=False)
    try:
        s.step(clock.t)
        for _ in range(90):  # the span reaches the window after 60 s; then buckets are kept
            end = clock.t + 1.0
            while clock.t < end:
                clock.t = min(max(s.next_wake(), clock.t + 1e-3), end)
                s.step(clock.t)
            kept.refresh(force=True, now=clock.t)
        fresh = GPUMonitor(sampler=s, metrics="membw,util,power", window_s=60, start=False)
        fresh.refresh(force=True, now=clock.t)
        np.testing.assert_array_equal(parts(kept).lines.x, parts(fresh).lines.x)
        np.testing.assert_array_equal(parts(kept).lines.y, parts(fresh).lines.y)
        fresh.close()
    finally:
        kept.close()
        s.stop()


def test_rows_stamped_after_now_wait_for_a_later_refresh() -> None:
    sset = SparkSet(1, 1.0)
    t = np.array([99.2, 99.6, 100.3])  # the last one a little after now (clocks differ)
    trace, b = update_packed(sset, np.array([3]), t, np.array([1.0, 5.0, 9.0]), 100.0, 38.0)
    x, v = points_of_all(trace, b, 1, 100.0, 38.0, 3.0)[0]
    assert len(x) and x.max() <= 0 and 9.0 not in v
    trace, b = update_packed(sset, np.array([0]), np.empty(0), np.empty(0), 100.5, 38.0)
    x, v = points_of_all(trace, b, 1, 100.5, 38.0, 3.0)[0]
    assert 9.0 in v and x.max() <= 0
