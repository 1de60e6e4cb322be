"""The panel's batched store reads give what the one-at-a-time reads give."""

from __future__ import annotations

import numpy as np
import pytest

from nbgpu.store import Store


def _store() -> Store:
    """Two devices, one metric kept in two streams, NaN tails, rows folded past full_res_s."""
    st = Store(full_res_s=20.0, bucket_s=5.0, history_s=60.0)
    rng = np.random.default_rng(1)
    for dev in (0, 1):
        st.declare(dev, "tick", {"util": np.float32, "temp": np.float32})
        st.declare(dev, "power", {"power": np.float64, "util": np.float32})
        t = np.arange(0.0, 100.0, 0.5)
        temp = rng.random(len(t)) * 80
        temp[-30:] = np.nan  # temp stopped reporting 15 s ago
        st.append_many(dev, "tick", t, {"util": rng.random(len(t)) * 100, "temp": temp})
        for k, tk in enumerate(np.arange(100.0, 101.0, 0.1)):
            st.append_row(dev, "power", tk, {"power": 50.0 + k, "util": np.nan if k % 2 else 10.0 + k})
    st.declare(2, "tick", {"temp": np.float32})
    st.append_many(2, "tick", np.arange(0.0, 100.0), {"temp": np.r_[1.0, np.full(99, np.nan)]})
    return st


def test_last_many_is_last_of_each_metric() -> None:
    st = _store()
    for dev in (0, 1, 2):
        many = st.last_many(dev)
        assert sorted(many) == sorted(st.metrics_of(dev))
        for metric, (t, v) in many.items():
            np.testing.assert_equal((t, v), st.last(dev, metric))
    t, v = st.last_many(0)["util"]
    assert (t, v) == (pytest.approx(100.8), 18.0)  # the newer of the two streams
    assert np.isnan(st.last_many(2)["temp"][0])  # its one good row was folded away


def test_last_is_the_newest_good_row_still_kept() -> None:
    st = _store()
    t, v = st.last(0, "temp")
    times, values = st.series(0, "temp", coarse=False)
    assert (t, v) == (times[-1], values[-1])
    assert 84.0 <= t <= 85.0


def test_series_many_is_series_of_each_pair() -> None:
    st = _store()
    pairs = [(0, "util"), (1, "power"), (0, "temp"), (1, "util"), (2, "temp"), (5, "util")]
    for t0, t1 in [(-np.inf, np.inf), (50.0, 100.5), (99.0, 99.0)]:
        for (dev, metric), (t, v) in zip(pairs, st.series_many(pairs, t0, t1), strict=True):
            want_t, want_v = st.series(dev, metric, t0, t1)
            np.testing.assert_array_equal(t, want_t)
            np.testing.assert_array_equal(v, want_v)
