"""The store's fast reads for the panel: packed series and the newest row of every metric."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nbgpu.store import Store
from nbgpu.store_stream import CHUNK_ROWS


def _packed(st: Store, pairs: list, *args, **kwargs) -> tuple:
    """``series_rows`` with each pair's row count: (rows of each pair, times, values, cursor)."""
    pair, t, v, cursor = st.series_rows(pairs, *args, **kwargs)
    return np.bincount(pair, minlength=len(pairs)), t, v, cursor


def _two_stream_store(start: float) -> Store:
    """A metric kept in two streams (a tick and a buffer), interleaved, with ties and NaNs."""
    st = Store(full_res_s=30.0, bucket_s=5.0, history_s=120.0)
    rng = np.random.default_rng(7)
    st.declare(0, "tick", {"util": np.float32, "temp": np.float32})
    st.declare(0, "buf", {"util": np.float64})
    st.declare(1, "tick", {"util": np.float32, "temp": np.float32})
    t = start + np.arange(0.0, 200.0, 0.1)
    util = rng.random(len(t)) * 100
    util[rng.random(len(t)) < 0.2] = np.nan
    st.append_many(0, "tick", t, {"util": util, "temp": rng.random(len(t)) * 80})
    st.append_many(1, "tick", t, {"util": util, "temp": np.full(len(t), np.nan)})
    tb = start + np.arange(0.0, 200.0, 0.02)  # every 5th time equals a tick's: a tie
    st.append_many(0, "buf", tb, {"util": rng.random(len(tb)) * 100})
    return st


@pytest.mark.parametrize("start", [0.0, 1000.0, 1.7e9])
def test_packed_series_is_series_of_each_pair_end_to_end(start: float) -> None:
    st = _two_stream_store(start)
    pairs = [(0, "util"), (1, "temp"), (0, "temp"), (1, "util"), (7, "util"), (0, "util")]
    for t0, t1 in [(-np.inf, np.inf), (start + 150.0, start + 199.5), (start + 60.0, start + 60.0),
                   (start + 10.0, start + 175.0)]:
        lengths, t, v, _ = _packed(st, pairs, t0, t1)
        assert len(lengths) == len(pairs) and lengths.sum() == len(t) == len(v)
        ends = np.cumsum(lengths)
        for i, (dev, metric) in enumerate(pairs):
            want_t, want_v = st.series(dev, metric, t0, t1)
            np.testing.assert_array_equal(t[ends[i] - lengths[i]:ends[i]], want_t)
            np.testing.assert_array_equal(v[ends[i] - lengths[i]:ends[i]], want_v)


def test_packed_series_reads_only_full_resolution_when_asked() -> None:
    st = _two_stream_store(1000.0)
    lengths, t, _, _ = _packed(st, [(0, "temp")], coarse=False)
    want_t, _ = st.series(0, "temp", coarse=False)
    np.testing.assert_array_equal(t, want_t)
    assert lengths[0] < len(st.series(0, "temp")[0])  # the coarse rows were left out


def test_packed_series_of_nothing_is_empty() -> None:
    st = Store()
    lengths, t, v, _ = _packed(st, [])
    assert len(lengths) == len(t) == len(v) == 0
    st.declare(0, "tick", {"util": np.float32})
    lengths, t, v, _ = _packed(st, [(0, "util")])
    assert list(lengths) == [0] and len(t) == 0


def test_newest_of_each_metric_follows_appends_ties_and_folding() -> None:
    st = Store(full_res_s=20.0, bucket_s=5.0, history_s=60.0)
    st.declare(0, "tick", {"util": np.float32, "temp": np.float32, "clock": np.float64})
    st.declare(0, "buf", {"util": np.float64})
    st.append_row(0, "tick", 10.0, {"util": 1.5, "temp": 40.0, "clock": 1400})
    st.append_row(0, "buf", 10.0, {"util": 2.5})  # a tie: the first stream declared wins, as last()
    newest = st.last_many(0)
    assert list(newest) == ["util", "temp", "clock"]
    assert newest == {"util": (10.0, 1.5), "temp": (10.0, 40.0), "clock": (10.0, 1400.0)}
    assert all(type(x) is float for tv in newest.values() for x in tv)
    st.append_row(0, "buf", 11.0, {"util": 3.5})
    st.append_row(0, "tick", 12.0, {"util": math.nan, "temp": 41.0})
    assert st.last_many(0)["util"] == (11.0, 3.5)
    assert st.last_many(0)["clock"] == (10.0, 1400.0)
    for t in np.arange(13.0, 60.0):  # clock stops reporting; its row is folded away
        st.append_row(0, "tick", float(t), {"util": 5.0, "temp": 42.0})
    newest = st.last_many(0)
    assert math.isnan(newest["clock"][0]) and math.isnan(newest["clock"][1])
    assert newest["util"] == (59.0, 5.0)
    for dev in (0,):
        for metric, tv in st.last_many(dev).items():
            np.testing.assert_equal(tv, st.last(dev, metric))


def test_newest_follows_a_redeclared_stream_and_many_chunks() -> None:
    st = Store()
    st.declare(0, "tick", {"util": np.float32})
    st.append_row(0, "tick", 1.0, {"util": 9.0})
    st.declare(0, "tick", {"util": np.float32, "temp": np.float32})  # replaced: old rows gone
    assert math.isnan(st.last_many(0)["util"][0])
    t = np.arange(3 * CHUNK_ROWS) * 0.25  # within full resolution: nothing folded
    temp = np.where(t < CHUNK_ROWS * 0.25, t, np.nan)  # good in the first chunk only
    st.append_many(0, "tick", t, {"util": t, "temp": temp})
    assert st.last_many(0) == {"util": (t[-1], t[-1]), "temp": (t[CHUNK_ROWS - 1], t[CHUNK_ROWS - 1])}
    assert st.last_many(5) == {}


def test_latest_copies_the_newest_rows_with_their_states(stepped) -> None:
    """latest(): each value is the store's newest good one when live, NaN otherwise."""
    import nbgpu

    clock = stepped.new_clock(1.7e9)
    sim = nbgpu.SimulatedGPUs(count=3, seed=2, clock=clock)
    s = nbgpu.Sampler(source=sim, interval=0.5, clock=clock, host=False)
    _run(s, clock, 3.0)
    sim.inject_error("nvmlDeviceGetMemoryInfo", 999, gpu=0)
    sim.set_unsupported("nvmlDeviceGetTemperature", gpu=1)
    sim.lose_gpu(2)
    _run(s, clock, 4.0)
    rows = s.latest()
    assert [r["state"] for r in rows] == ["stopped", "stopped", "lost"]
    assert rows[0]["states"]["mem_used_bytes"] == "failed"
    assert rows[1]["states"]["temp_c"] == "unsupported"
    assert rows[0]["states"]["temp_c"] == "live"
    for row in rows:
        newest = s.store.last_many(row["gpu"])
        assert list(row["states"]) == list(newest) == list(row["last_good"])
        for metric, (_, v) in newest.items():
            np.testing.assert_equal(row["last_good"][metric], v)
            want = v if row["states"][metric] == "live" else math.nan
            np.testing.assert_equal(row[metric], want)
        times = [t for t, _ in newest.values() if not math.isnan(t)]
        assert row["time_s"] == max(times)
        assert abs(row["time"].timestamp() - max(times)) < 1e-6
    s.stop()


def _run(s, clock, seconds: float) -> None:
    """Step ``s`` at each wake-up its thread would have in ``seconds`` of the fake clock."""
    clock.t += 1e-3
    end = clock.t + seconds
    while clock.t <= end + 1e-9:
        s.step(clock.t)
        clock.t = max(s.next_wake(), clock.t + 1e-6)
    clock.t = end


def test_a_reader_following_the_store_gets_every_row_once_late_ones_too() -> None:
    st = Store(full_res_s=600.0)
    st.declare(0, "tick", {"util": np.float32, "bw": np.float32})
    st.declare(0, "bw", {"bw": np.float64})  # drained every 10 s: rows up to 10 s late
    pairs = [(0, "util"), (0, "bw")]
    start = 1.7e9
    got_t: list[list[np.ndarray]] = [[], []]
    cursor = None
    for k in range(1, 40):
        now = start + k
        st.append_row(0, "tick", now, {"util": float(k), "bw": np.nan})
        if k % 10 == 0:
            tb = now - 10 + np.arange(1, 51) * 0.2
            st.append_many(0, "bw", tb, {"bw": tb - start})
        lengths, t, _, cursor = _packed(st, pairs, start, np.inf, since=cursor)
        ends = np.cumsum(lengths)
        for i in range(2):
            got_t[i].append(t[ends[i] - lengths[i]:ends[i]])
    for i, (dev, metric) in enumerate(pairs):
        want, _ = st.series(dev, metric)
        np.testing.assert_array_equal(np.sort(np.concatenate(got_t[i])), want)


def test_a_follower_gets_each_new_row_once_within_chunks_and_across_them() -> None:
    from nbgpu.store_stream import CHUNK_ROWS

    st = Store(full_res_s=3600.0)
    for dev in (0, 1):
        st.declare(dev, "power", {"power_w": np.float32})
    pairs = [(0, "power_w"), (1, "power_w")]
    rng = np.random.default_rng(8)
    cursor, t_next = None, 1000.0
    for k, n in enumerate([5, 700, 0, 1500, CHUNK_ROWS + 300, 3, 2 * CHUNK_ROWS, 40]):
        times = t_next + np.arange(n) * 0.02
        t_next += n * 0.02 + 1.0
        want_t, want_v, want_pair = [], [], []
        t0 = times[n // 2] if k in (1, 4) else -np.inf  # late rows before the window's start are not read
        for i, dev in enumerate((0, 1)):
            v = rng.random(n).astype(np.float32) * 100
            v[rng.random(n) < 0.1] = np.nan
            st.append_many(dev, "power", times, {"power_w": v})
            ok = ~np.isnan(v) & (times >= t0)
            want_t.append(times[ok])
            want_v.append(v[ok].astype(np.float64))
            want_pair.append(np.full(int(ok.sum()), i))
        pair, t, v, new_cursor = st.series_rows(pairs, t0, since=cursor)
        lengths, t2, v2, _ = _packed(st, pairs, t0, since=cursor)
        cursor = new_cursor
        np.testing.assert_array_equal(pair, np.concatenate(want_pair))
        np.testing.assert_array_equal(t, np.concatenate(want_t))
        np.testing.assert_array_equal(v, np.concatenate(want_v))
        np.testing.assert_array_equal(lengths, [len(w) for w in want_t])
        np.testing.assert_array_equal(t2, t)
        np.testing.assert_array_equal(v2, v)
