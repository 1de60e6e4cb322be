"""The bounded store, decimation, exports and imports without the notebook stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import nbgpu
from nbgpu.store import Store


def fill(store: Store, seconds: float, hz: float, start: float = 1e9) -> None:
    n = int(seconds * hz)
    t = start + np.arange(n) / hz
    v = (np.arange(n) % 100).astype(np.float64)
    store.declare(0, "power", {"power_w": np.float32})
    for i in range(0, n, 5000):
        store.append_many(0, "power", t[i:i + 5000], {"power_w": v[i:i + 5000]})


def test_old_rows_fold_into_buckets_and_memory_stays_bounded():
    store = Store(full_res_s=60, bucket_s=10, history_s=600)
    fill(store, seconds=1800, hz=50)
    t, cols, decimated = store.read_stream(0, "power")
    full = t[~decimated]
    assert 60 <= full[-1] - full[0] <= 60 + 2 * 2048 / 50  # the last minute, + up to two chunks
    coarse = t[decimated]
    assert coarse[-1] - coarse[0] <= 600 + 10
    assert np.median(np.diff(coarse)) == pytest.approx(10, abs=0.01)
    # bucket means of a 0..99 sawtooth at 50 Hz over 10 s
    assert np.nanmean(cols["power_w"][decimated]) == pytest.approx(49.5, abs=1)
    one_hour = store.nbytes()
    fill2 = Store(full_res_s=60, bucket_s=10, history_s=600)
    fill(fill2, seconds=5400, hz=50)
    assert fill2.nbytes() <= one_hour * 1.1  # longer runs do not grow the store


def tick_rows(store: Store, seconds: float, every_s: float, start: float = 1e9) -> np.ndarray:
    """One row per ``every_s`` (a sampler's tick stream), appended one at a time."""
    store.declare(0, "tick", {"mem_used_bytes": np.float64})
    times = start + np.arange(0, seconds, every_s)
    for i, t in enumerate(times):
        store.append_row(0, "tick", float(t), {"mem_used_bytes": float(i)})
    return times


def test_no_row_older_than_history_is_kept_or_returned_whatever_the_chunking():
    store = Store(history_s=300)  # full resolution defaults to an hour: history bounds it
    times = tick_rows(store, seconds=1500, every_s=0.5)
    t, _, _ = store.read_stream(0, "tick")
    assert times[-1] - t[0] <= 300
    ts, _ = store.series(0, "mem_used_bytes")
    assert times[-1] - ts[0] <= 300


def test_full_resolution_holds_per_row_within_one_bucket_and_older_rows_are_buckets():
    store = Store(full_res_s=60, bucket_s=10, history_s=3600)
    times = tick_rows(store, seconds=900, every_s=0.5)  # sparse: 2048 rows span 1024 s
    t, cols, decimated = store.read_stream(0, "tick")
    full = t[~decimated]
    assert 60 <= times[-1] - full[0] <= 60 + 10
    assert decimated.dtype == bool and decimated[: len(t) - len(full)].all()
    coarse_t = t[decimated]
    assert np.allclose(np.diff(coarse_t), 10)  # whole buckets, none split in two
    assert (np.diff(t) > 0).all()
    # each bucket is the mean of its 20 rows (values are the row numbers)
    first = cols["mem_used_bytes"][decimated][0]
    assert first == pytest.approx(np.mean(np.arange(20)))


def test_events_carry_increasing_sequence_numbers_and_a_cursor_never_repeats():
    store = Store(max_events=5)
    from nbgpu.store import Event

    seen, cursor = [], 0
    for i in range(23):
        store.add_event(Event(float(i), "mark", f"m{i}"))
        if i % 3 == 0:
            new = store.events_since(cursor)
            seen += [e.label for e in new]
            cursor = new[-1].seq if new else cursor
    new = store.events_since(cursor)
    seen += [e.label for e in new]
    assert len(seen) == len(set(seen))  # nothing read twice
    assert seen[-1] == "m22" and [e.seq for e in store.events] == list(range(19, 24))
    assert store.events_since(store.events[-1].seq) == []


def test_series_reads_coarse_then_full_resolution_in_time_order():
    store = Store(full_res_s=30, bucket_s=5, history_s=3600)
    fill(store, seconds=300, hz=20)
    t, _ = store.series(0, "power_w")
    assert (np.diff(t) > 0).all()
    assert t[0] < 1e9 + 10 and t[-1] > 1e9 + 299


def test_series_of_a_metric_whose_values_stopped_still_finds_its_folded_bucket():
    # Values until t=102, NaN after; folded into 10 s buckets stamped at their middle (105).
    # A read from 103 on finds no row at full resolution, but the bucket's row at 105 is in it.
    store = Store(full_res_s=30, bucket_s=10, history_s=3600)
    store.declare(0, "tick", {"a": np.float64, "b": np.float64})
    t = np.arange(0.0, 400.0, 0.5)
    store.append_many(0, "tick", t, {"a": np.where(t <= 102, 7.0, np.nan), "b": np.ones(len(t))})
    got_t, got_v = store.series(0, "a", 103.0, 400.0)
    assert list(got_t) == [105.0] and list(got_v) == [7.0]
    assert len(store.series(0, "a", 110.5, 400.0)[0]) == 0
    assert len(store.series(0, "b", 103.0, 400.0)[0]) > 0


def test_a_stream_that_never_wrote_a_column_adds_nothing_to_its_series():
    # Power polled in the tick stream (NaN there beside a sample buffer) and buffered: the
    # series is the buffer's rows alone, in order, whichever stream is asked first.
    store = Store()
    store.declare(0, "tick", {"power_w": np.float32, "temp_c": np.float32})
    store.declare(0, "power", {"power_w": np.float32})
    ticks = 1e9 + np.arange(0.0, 20.0, 1.0)
    store.append_many(0, "tick", ticks, {"power_w": np.full(20, np.nan), "temp_c": np.full(20, 50.0)})
    samples = 1e9 + np.arange(0.0, 20.0, 0.02)
    store.append_many(0, "power", samples, {"power_w": np.full(len(samples), 300.0)})
    t, v = store.series(0, "power_w", 1e9 + 5.0, 1e9 + 10.0)
    np.testing.assert_array_equal(t, samples[(samples >= 1e9 + 5.0) & (samples <= 1e9 + 10.0)])
    assert (v == 300.0).all()


def sampled(stepped) -> nbgpu.Sampler:
    """A stopped sampler with 0.6 s of fake time on two simulated GPUs (7 ticks, stepped by hand)."""
    sim, clock = stepped.fake()
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    clock.run(s, 0.6)
    s.stop()
    assert s.ticks == 7
    return s


def test_jsonl_uses_the_monitoring_script_keys_plus_extras(tmp_path, stepped):
    s = sampled(stepped)
    path = s.timeline.to_jsonl(str(tmp_path / "run.jsonl"))
    with open(path) as fh:
        records = [json.loads(line) for line in fh]
    assert records
    legacy = ("timestamp", "gpu_id", "gpu_util_percent", "memory_used_gb", "memory_total_gb",
              "memory_util_percent", "temperature_c", "power_w")
    last = records[-1]
    for key in legacy:
        assert key in last, key
    assert last["memory_total_gb"] == pytest.approx(150.75, abs=0.1)
    assert "sm_clock_mhz" in last and "energy_j" in last
    pd.Timestamp(last["timestamp"])  # ISO time


def test_csv_and_parquet_round_trip(tmp_path, stepped):
    s = sampled(stepped)
    df = s.timeline.to_pandas()
    csv = pd.read_csv(s.timeline.to_csv(str(tmp_path / "run.csv")))
    assert len(csv) == len(df) and list(csv.columns) == list(df.columns)
    pq = pd.read_parquet(s.timeline.to_parquet(str(tmp_path / "run.parquet")))
    assert len(pq) == len(df)
    assert pq["power_w"].sum() == pytest.approx(df["power_w"].sum())


def test_a_failed_export_leaves_the_old_file_untouched(tmp_path, monkeypatch, stepped):
    s = sampled(stepped)
    path = tmp_path / "run.jsonl"
    path.write_text("precious\n")

    written = []

    def broken(*a, **k):  # the first record is written, the second fails
        if written:
            raise RuntimeError("disk on fire")
        written.append(1)
        return {"timestamp": "x"}

    monkeypatch.setattr("nbgpu.files.jsonl_record", broken)
    with pytest.raises(RuntimeError):
        s.timeline.to_jsonl(str(path))
    assert path.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]


def test_export_to_a_missing_folder_is_one_clear_error(tmp_path, stepped):
    s = sampled(stepped)
    with pytest.raises(nbgpu.NbgpuError, match="does not exist"):
        s.timeline.to_csv(str(tmp_path / "nope" / "run.csv"))


def test_core_imports_and_samples_without_the_notebook_stack():
    code = (
        "import sys\n"
        "for m in ('IPython', 'ipywidgets', 'bqplot', 'ipykernel'): sys.modules[m] = None\n"
        "import threading, nbgpu\n"
        "stepped = threading.Event()\n"
        "s = nbgpu.Sampler(source='sim', interval=0.1)\n"
        "s.add_listener(lambda sampler, now: stepped.set())\n"
        "with s: assert stepped.wait(30), 'the sampler thread took no step'\n"
        "print(len(s.timeline.to_pandas()) > 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"


def test_import_starts_nothing():
    code = ("import threading, nbgpu, sys\n"
            "print(threading.active_count(), 'pynvml' in sys.modules, 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["1", "False", "False"]


@pytest.mark.parametrize("resolution", ["tick", "native"])
def test_decimated_is_a_boolean_column_never_none(resolution, stepped, clock):
    s = stepped(interval=0.5, full_res_s=2, bucket_s=1, history_s=100)
    for _ in range(40):
        clock.t += 0.25
        s.step(clock.t)
    s.stop()
    df = s.timeline.to_pandas(resolution=resolution)
    assert "decimated" in df.columns
    assert df["decimated"].dtype == bool
    assert df["decimated"].any() and not df["decimated"].all()


def test_rows_appended_one_at_a_time_are_stored_as_a_batch_of_them_is():
    # A tick appends one row: its fast path must keep, drop and round exactly as a batch does.
    cols = {"power_w": np.float32, "mem_used_bytes": np.float64}
    one, batch = Store(full_res_s=5.0, bucket_s=1.0), Store(full_res_s=5.0, bucket_s=1.0)
    for store in (one, batch):
        store.declare(0, "tick", cols)
    times = np.array([1.0, 1.5, 1.5, 1.2, 2.0, 3.0, 9.0, 9.5])  # a repeat and a late row
    power = np.array([100.123456789, np.nan, 7.0, 8.0, np.nan, 200.0, 300.0, np.nan])
    mem = np.arange(len(times), dtype=np.int64) * 2**20  # ints into a float column
    extra = np.ones(len(times))  # a value with no column is ignored
    for i in range(len(times)):
        one.append_many(0, "tick", times[i:i + 1],
                        {"power_w": power[i:i + 1], "mem_used_bytes": mem[i:i + 1], "x": extra[i:i + 1]})
    for i in (0, 2, 4, 6):  # the same rows in batches of two: a batch's own rows increase
        batch.append_many(0, "tick", times[i:i + 2],
                          {"power_w": power[i:i + 2], "mem_used_bytes": mem[i:i + 2], "x": extra[:2]})
    for metric in cols:
        for a, b in zip(one.series(0, metric), batch.series(0, metric), strict=True):
            np.testing.assert_array_equal(a, b)
        assert one.last(0, metric) == batch.last(0, metric)
    assert one.last_many(0) == batch.last_many(0)


def test_a_row_of_floats_is_kept_as_append_many_keeps_a_one_row_array():
    # The sampler writes a tick's reads as one row of floats (no arrays made): the store must
    # keep exactly what the one-row arrays it replaced kept, a row no newer than the last too.
    rows = [(10.0, {"a": 1.5, "b": float("nan")}), (10.0, {"a": 9.0, "b": 2.0}),
            (9.0, {"a": 7.0, "b": 7.0}), (11.0, {"a": 2.5}), (12.0, {"a": float("nan"), "b": 4.0})]
    by_row, by_array = Store(), Store()
    for st in (by_row, by_array):
        st.declare(0, "tick", {"a": np.float32, "b": np.float64})
    for t, values in rows:
        by_row.append_row(0, "tick", t, values)
        by_array.append_many(0, "tick", np.array([t]), {k: np.array([v]) for k, v in values.items()})
    for metric in ("a", "b"):
        np.testing.assert_array_equal(by_row.series(0, metric), by_array.series(0, metric))
        assert by_row.last(0, metric) == by_array.last(0, metric)
    assert by_row.series(0, "a")[1].tolist() == [1.5, 2.5] and by_row.last(0, "b") == (12.0, 4.0)
    assert by_row.generation == by_array.generation


def test_series_many_gives_one_pair_of_arrays_per_pair_asked_and_none_for_none():
    from nbgpu.store import Store

    store = Store()
    store.declare(0, "tick", {"util_pct": np.float64})
    store.append_many(0, "tick", np.array([1.0, 2.0, 3.0]), {"util_pct": np.array([10.0, np.nan, 30.0])})
    assert store.series_many([]) == []
    (t0, v0), (t1, v1) = store.series_many([(0, "util_pct"), (1, "util_pct")])
    assert t0.tolist() == [1.0, 3.0] and v0.tolist() == [10.0, 30.0] and len(t1) == len(v1) == 0
