"""The rules' Window: one store read per metric (of every GPU at once), and the same rows as
reading each span of each GPU."""

from __future__ import annotations

import numpy as np
import pytest

from nbgpu.diagnostics.window import Window, median
from nbgpu.store import Store

NOW = 10_000.0


class CountingStore(Store):
    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.reads = 0

    def series_rows(self, *args, **kwargs):  # every read of series and series_many
        self.reads += 1
        return super().series_rows(*args, **kwargs)


def _store() -> CountingStore:
    """Memory every second in one stream, every 0.1 s in another (two streams, as the
    sampler's tick and fast-memory lanes), some NaN; older rows folded into buckets."""
    store = CountingStore(full_res_s=60.0, bucket_s=5.0, history_s=900.0)
    store.declare(0, "tick", {"mem": np.float64})
    store.declare(0, "memory", {"mem": np.float64})
    rng = np.random.default_rng(1)
    t_slow = np.arange(NOW - 800.0, NOW + 0.5, 1.0)
    slow = rng.random(len(t_slow))
    slow[::7] = np.nan
    store.append_many(0, "tick", t_slow, {"mem": slow})
    t_fast = np.arange(NOW - 30.0, NOW, 0.1) + 0.05
    store.append_many(0, "memory", t_fast, {"mem": rng.random(len(t_fast))})
    return store


@pytest.mark.parametrize("spans", [(15.0, 120.0, 600.0), (600.0, 15.0, 120.0), (3.0, 3.0, 61.0, 1.0)])
def test_every_span_gives_the_rows_a_read_of_that_span_gives(spans):
    store, direct = _store(), _store()
    shared: dict = {}
    for _ in range(2):  # a second evaluation starts from the widest span of the first
        window = Window(store, NOW, 5.0, 1.0, spans=shared)
        for span in spans:
            t, v = window.series(0, "mem", span)
            want_t, want_v = direct.series(0, "mem", NOW - span, NOW)
            np.testing.assert_array_equal(t, want_t)
            np.testing.assert_array_equal(v, want_v)
            assert len(t) and not np.isnan(v).any()


def test_a_metric_is_read_once_per_evaluation_once_its_widest_span_is_known():
    store = _store()
    shared: dict = {}
    first = Window(store, NOW, 5.0, 1.0, spans=shared)
    for span in (15.0, 120.0, 600.0, 15.0):
        first.series(0, "mem", span)
    assert store.reads == 3  # each wider ask reads again; the repeat is cached
    store.reads = 0
    second = Window(store, NOW + 1.0, 5.0, 1.0, spans=shared)
    for span in (15.0, 120.0, 600.0):
        second.series(0, "mem", span)
    assert store.reads == 1


@pytest.mark.parametrize("spans", [(60.0,), (15.0, 300.0)])
def test_every_gpus_same_metric_comes_in_one_read_with_the_rows_of_its_own(spans):
    """The rules ask each GPU in turn: one store read serves them all, and a wider ask re-reads
    every GPU's same metric at once, not each GPU alone as its turn comes."""
    store, direct = _store(), _store()
    for s in (store, direct):
        s.declare(1, "tick", {"mem": np.float64})
        s.append_many(1, "tick", np.arange(NOW - 700.0, NOW + 0.5, 0.5), {"mem": np.arange(1401.0)})
    window = Window(store, NOW, 5.0, 1.0, keys=(0, 1))
    for span in spans:
        for gpu in (0, 1):
            t, v = window.series(gpu, "mem", span)
            want_t, want_v = direct.series(gpu, "mem", NOW - span, NOW)
            np.testing.assert_array_equal(t, want_t)
            np.testing.assert_array_equal(v, want_v)
    assert store.reads == len(spans)


def test_an_unknown_metric_is_empty():
    window = Window(_store(), NOW, 5.0, 1.0)
    t, v = window.series(0, "power_w", 10.0)
    assert len(t) == len(v) == 0
    assert window.recent(0, "power_w", 10.0) is None


def test_the_mean_weights_each_reading_until_the_next_and_caps_gaps():
    store = Store(full_res_s=600.0, bucket_s=5.0, history_s=900.0)
    store.declare(0, "tick", {"power_w": np.float64})
    t = np.array([NOW - 9.0, NOW - 8.0, NOW - 7.0, NOW - 1.0])  # a 6 s gap before the last
    store.append_many(0, "tick", t, {"power_w": np.array([100.0, 200.0, 300.0, 400.0])})
    window = Window(store, NOW, 5.0, 1.5)
    # Held for 1, 1, 6 -> capped at 4 x the median spacing (1 s) = 4, and 1 s until now.
    assert window.mean(0, "power_w", 9.0) == pytest.approx((100 + 200 + 300 * 4 + 400) / 7)


@pytest.mark.parametrize("lag_s", [0.0, 0.25, 3.0, 9.5])
def test_a_metric_complete_only_up_to_a_time_is_judged_up_to_it(lag_s):
    # A buffered metric reaches the store at the buffer's drain: up to ``complete`` only.
    store, direct = _store(), _store()
    complete = {(0, "mem"): NOW - lag_s}
    shared: dict = {}
    for _ in range(2):
        window = Window(store, NOW, 5.0, 1.0, spans=shared,
                        complete=lambda dev, metric: complete.get((dev, metric), np.inf))
        assert window.end(0, "mem") == NOW - lag_s
        assert window.end(0, "mem", "other") == NOW - lag_s  # the earliest of the metrics
        assert window.end(0) == window.end(0, "other") == NOW
        for span in (15.0, 120.0, 15.0):
            t, v = window.series(0, "mem", span)
            want_t, want_v = direct.series(0, "mem", NOW - lag_s - span, NOW - lag_s)
            np.testing.assert_array_equal(t, want_t)
            np.testing.assert_array_equal(v, want_v)
        later = window.series(0, "mem", 15.0, end=NOW)  # another metric's end, asked for
        np.testing.assert_array_equal(later[0], direct.series(0, "mem", NOW - 15.0, NOW)[0])
    store.reads = 0
    window = Window(store, NOW, 5.0, 1.0, spans=shared,
                    complete=lambda dev, metric: complete.get((dev, metric), np.inf))
    window.series(0, "mem", 15.0)
    window.series(0, "mem", 120.0, end=NOW)
    assert store.reads == 1  # the reach an earlier end needs is remembered too


def test_the_mean_and_freshness_are_taken_at_the_windows_end():
    store = Store(full_res_s=600.0, bucket_s=5.0, history_s=900.0)
    store.declare(0, "tick", {"util_pct": np.float64})
    t = np.arange(NOW - 20.0, NOW - 8.0 + 1e-9, 0.5)  # drained 8 s ago
    store.append_many(0, "tick", t, {"util_pct": np.where(t < NOW - 13.0, 10.0, 90.0)})
    blind = Window(store, NOW, 5.0, 1.0)
    assert np.isnan(blind.mean(0, "util_pct", 10.0))  # judged at now: 8 s old, stale
    window = Window(store, NOW, 5.0, 1.0, complete=lambda dev, metric: NOW - 8.0)
    # [now - 18, now - 8]: ten readings of 10 % and ten of 90 % held 0.5 s each; the
    # newest holds until the window's end, which it is (judged at now it would hold 8 s).
    assert window.mean(0, "util_pct", 10.0) == pytest.approx(50.0)
    assert window.recent(0, "util_pct", 10.0) is not None


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_leak_trend_needs_every_slice_higher_and_the_last_still_rising(n):
    from nbgpu.diagnostics.rules_memory import _segments_rising

    t = np.linspace(0.0, 120.0, 241)
    rise = 1e7 * 120 * (n - 1) / n  # from the first slice's median to the last's
    assert _segments_rising(t, 1e9 + 1e7 * t, 0.0, 120.0, n) == pytest.approx(rise, rel=0.05)
    assert _segments_rising(t, np.full(len(t), 5e9), 0.0, 120.0, n) is None  # flat
    assert _segments_rising(t, 9e9 - 1e7 * t, 0.0, 120.0, n) is None  # falling
    warm_up = 1e9 + 1e7 * np.minimum(t, 120.0 * (n - 1) / n + 5)  # stops rising early in the last slice
    assert _segments_rising(t, warm_up, 0.0, 120.0, n) is None
    gap = (t < 30) | (t >= 60)  # the second of four slices without readings decides nothing
    assert _segments_rising(t[gap], 1e9 + 1e7 * t[gap], 0.0, 120.0, 4) is None


@pytest.mark.parametrize("n", [1, 2, 3, 4, 31, 60, 1501])
def test_the_rules_median_is_numpys_to_the_bit(n):
    """The rules' median (one partition) gives what ``np.median`` gives, NaN included."""
    rng = np.random.default_rng(n)
    for values in (rng.random(n) * 1e9, np.round(rng.random(n) * 7), rng.integers(0, 9, n),
                   np.sort(rng.random(n))[::-1]):
        assert median(values) == float(np.median(values))
        with_nan = values.astype(np.float64)
        with_nan[rng.integers(n)] = np.nan
        assert np.isnan(median(with_nan))
    assert np.isnan(median(np.empty(0)))

