"""Min/max decimation: same points as the plain per-bucket definition, without its loop."""

from __future__ import annotations

import numpy as np
import pytest

from nbgpu.decimate import decimate_minmax
from spark_oracle import bucket_minmax


def reference(t: np.ndarray, v: np.ndarray, buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """The definition, one bucket at a time: first min and first max index of each slice."""
    if len(t) <= 2 * buckets:
        return t, v
    edges = np.linspace(t[0], t[-1], buckets + 1)
    idx = np.clip(np.searchsorted(edges, t, "right") - 1, 0, buckets - 1)
    keep: set[int] = set()
    for b in np.unique(idx):
        where = np.flatnonzero(idx == b)
        seg = v[where]
        if np.isnan(seg).all():
            keep.add(int(where[0]))
        else:
            keep.update((int(where[np.nanargmin(seg)]), int(where[np.nanargmax(seg)])))
    out = np.array(sorted(keep))
    return t[out], v[out]


@pytest.mark.parametrize("seed", range(6))
def test_matches_the_per_bucket_definition(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 20_000))
    t = np.sort(rng.random(n) * 60.0)
    v = np.round(rng.normal(50, 20, n), 0)  # ties, so "first" min/max matters
    v[rng.random(n) < 0.1] = np.nan
    v[n // 3 : n // 3 + n // 10] = np.nan  # a whole gap
    buckets = int(rng.integers(5, 200))
    got_t, got_v = decimate_minmax(t, v, buckets)
    want_t, want_v = reference(t, v, buckets)
    np.testing.assert_array_equal(got_t, want_t)
    np.testing.assert_array_equal(got_v, want_v)


def test_keeps_peaks_and_bounds_points():
    t = np.arange(100_000) / 1000.0
    v = np.zeros_like(t)
    v[54_321] = 99.0
    v[70_000] = -5.0
    dt, dv = decimate_minmax(t, v, 200)
    assert len(dt) <= 400
    assert dv.max() == 99.0 and dv.min() == -5.0
    assert (np.diff(dt) > 0).all()


def test_short_input_is_returned_as_is():
    t, v = np.arange(10.0), np.arange(10.0)
    dt, dv = decimate_minmax(t, v, 5)
    assert dt is t and dv is v


def test_bucket_minmax_reduces_each_bucket():
    rng = np.random.default_rng(7)
    t = np.sort(rng.random(5000) * 100.0)
    v = rng.random(5000)
    v[:40] = np.nan
    bucket = np.floor(t / 2.5).astype(np.int64)
    b = bucket_minmax(t, v, bucket)
    assert list(b.index) == sorted(set(bucket.tolist()))
    for i, k in enumerate(b.index):
        sel = bucket == k
        assert b.count[i] == sel.sum()
        assert b.first_t[i] == t[sel][0] and b.last_t[i] == t[sel][-1]
        seg = v[sel]
        if np.isnan(seg).all():
            assert np.isnan(b.vmin[i]) and np.isnan(b.vmax[i])
            continue
        assert b.vmin[i] == np.nanmin(seg) and b.vmax[i] == np.nanmax(seg)
        assert b.tmin[i] == t[sel][np.nanargmin(seg)] and b.tmax[i] == t[sel][np.nanargmax(seg)]


def test_bucket_minmax_of_nothing_is_empty():
    b = bucket_minmax(np.empty(0), np.empty(0), np.empty(0, np.int64))
    assert len(b) == 0


def test_bucket_cells_are_bucket_minmax_of_nan_free_rows():
    from nbgpu.decimate import bucket_cells

    rng = np.random.default_rng(3)
    n = 3000
    t = np.sort(rng.random(n) * 100.0)
    v = np.round(rng.normal(50, 20, n), 0)  # ties, so "first" min/max matters
    v[rng.random(n) < 0.05] = 0.0
    v[rng.random(n) < 0.05] = -0.0
    v[rng.random(n) < 0.01] = np.inf
    v[:40] = 7.0  # a run of one value
    key = np.repeat(np.arange(60), 50) * 1000 + np.floor(t / 1.5).astype(np.int64)  # traces one after another
    number, cells = bucket_cells(t, v, key)
    b = bucket_minmax(t, v, key)
    np.testing.assert_array_equal(number, b.index)
    fields = (b.count, b.first_t, b.last_t, b.tmin, b.vmin, b.tmax, b.vmax)
    for i, want in enumerate(fields):
        np.testing.assert_array_equal(cells[:, i], want, err_msg=str(i))
        np.testing.assert_array_equal(np.signbit(cells[:, i]), np.signbit(want), err_msg=str(i))
