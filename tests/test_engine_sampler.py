"""The sampler on simulated GPUs: API, native resolution, threads, bad input."""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pandas as pd
import pytest

import nbgpu
from nbgpu.sources.simulated import SimulatedGPUs


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nbgpu-sampler" and t.is_alive()]


def test_devices_describe_each_gpu_and_its_metrics():
    with nbgpu.Sampler(source=SimulatedGPUs(count=3, seed=1)) as s:
        assert [d.key for d in s.devices] == [0, 1, 2]
        d = s.devices[0]
        assert "simulated" in d.name
        assert d.uuid.startswith("GPU-")
        assert d.mem_total_bytes > 100e9
        assert d.power_limit_w == 700.0
        for metric in ("util_pct", "mem_util_pct", "mem_used_bytes", "temp_c", "power_w",
                       "sm_clock_mhz", "energy_j", "sm_active_pct", "tensor_active_pct"):
            assert metric in d.metrics, metric


def test_sim_source_by_name_has_two_gpus_and_says_simulated():
    s = nbgpu.Sampler(source="sim")
    try:
        assert len(s.devices) == 2
        assert s.simulated
        assert "simulated" in s.source.describe()
    finally:
        s.stop()


def _machine_cpu_ticks() -> int:
    """The machine's CPU time so far in clock ticks (/proc/stat's first line), -1 without it."""
    try:
        with open("/proc/stat") as f:
            return sum(int(x) for x in f.readline().split()[1:])
    except OSError:
        return -1


def _until_machine_cpu_time_moves() -> None:
    """Wait (on the counter, not a fixed time) until the machine's CPU counters move: a host CPU %
    needs CPU time to pass between two reads, which a fake clock does not make."""
    start, deadline = _machine_cpu_ticks(), time.monotonic() + 5.0
    while _machine_cpu_ticks() == start and start >= 0 and time.monotonic() < deadline:
        time.sleep(0.002)
    if start < 0:
        time.sleep(0.05)


def test_timeline_has_the_documented_columns_and_utc_times(stepped):
    sim, clock = stepped.fake()
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    clock.run(s, 1.0)
    # Host CPU % is NaN ("not measured") where no CPU time passed since the last read: on a
    # fast machine the fake clock's ticks can all come within one clock tick of real time.
    _until_machine_cpu_time_moves()
    clock.run(s, 0.2)
    s.stop()
    df = s.timeline.to_pandas()
    for col in ("time", "gpu", "util_pct", "mem_util_pct", "mem_used_bytes", "mem_total_bytes",
                "temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz",
                "clock_event_reasons", "energy_j", "host_cpu_pct", "proc_rss_bytes"):
        assert col in df.columns, col
    assert str(df["time"].dt.tz) == "UTC"
    assert set(df["gpu"]) == {0, 1}
    assert not df.duplicated(["time", "gpu"]).any()
    tick = df.dropna(subset=["mem_used_bytes"])
    assert (tick["mem_used_bytes"] > 0).all()
    assert tick["host_ram_total_bytes"].notna().all()


def test_power_and_util_keep_native_resolution_with_a_slow_interval(stepped):
    sim, clock = stepped.fake()
    s = nbgpu.Sampler(source=sim, interval=1.0, clock=clock)
    clock.run(s, 10.6)  # the utilisation buffers are drained every 10 s
    s.stop()
    t, _ = s.timeline.series(0, "power_w")
    tu, _ = s.timeline.series(0, "util_pct")
    assert np.median(np.diff(t)) == pytest.approx(0.02, abs=0.003)
    assert np.median(np.diff(tu)) == pytest.approx(0.2, abs=0.02)
    tm, _ = s.timeline.series(0, "mem_used_bytes")
    assert 10 <= len(tm) <= 12  # cheap polled reads stay at the 1 s interval


def test_polling_fallback_where_a_card_has_no_sample_buffer(stepped):
    sim, clock = stepped.fake(sample_buffers=False)
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    clock.run(s, 0.8)
    s.stop()
    t, v = s.timeline.series(0, "power_w")
    assert len(t) >= 5
    assert np.median(np.diff(t)) == pytest.approx(0.1, abs=0.03)
    assert (v > 0).all()


def test_between_slices_time_and_accepts_datetimes(stepped):
    sim, clock = stepped.fake()
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    clock.run(s, 0.5)
    t0 = clock.t
    clock.run(s, 0.5)
    t1 = clock.t
    clock.run(s, 0.3)
    s.stop()
    part = s.timeline.between(t0, t1).to_pandas()
    assert len(part)
    assert part["time"].min().timestamp() >= t0
    assert part["time"].max().timestamp() <= t1

    again = s.timeline.between(pd.Timestamp(t0, unit="s", tz="UTC"), pd.Timestamp(t1, unit="s", tz="UTC"))
    assert len(again.to_pandas()) == len(part)


def test_latest_gives_newest_values_per_gpu():
    with nbgpu.Sampler(source="sim", interval=0.1) as s:
        deadline = time.monotonic() + 10
        while s.status().ticks < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        latest = s.latest()
    assert [r["gpu"] for r in latest] == [0, 1]
    assert 0 <= latest[0]["util_pct"] <= 100
    assert latest[0]["power_w"] > 50
    assert latest[0]["state"] == "running"
    assert abs(latest[0]["time_s"] - time.time()) < 5
    assert latest[0]["time"].timestamp() == pytest.approx(latest[0]["time_s"])
    assert str(latest[0]["time"].tz) == "UTC"


def test_one_thread_per_sampler_and_stop_joins_it():
    before = len(sampler_threads())
    s = nbgpu.Sampler(source="sim", interval=0.1)
    s.start()
    s.start()  # a second start is a no-op
    assert len(sampler_threads()) == before + 1
    s.stop()
    assert len(sampler_threads()) == before
    assert not s.running


def test_gpus_selection_keeps_only_those(stepped):
    sim, clock = stepped.fake(4)
    s = nbgpu.Sampler(source=sim, gpus=[1, 3], interval=0.1, clock=clock)
    clock.run(s, 0.3)
    s.stop()
    assert [d.key for d in s.devices] == [1, 3]
    assert set(s.timeline.to_pandas()["gpu"]) == {1, 3}


@pytest.mark.parametrize("interval", [0, -1, "fast", True, math.nan, math.inf])
def test_bad_interval_is_a_value_error_and_starts_nothing(interval):
    sim = SimulatedGPUs()
    before = len(sampler_threads())
    with pytest.raises(ValueError, match="interval"):
        nbgpu.Sampler(source=sim, interval=interval)
    assert len(sampler_threads()) == before
    assert not sim.initialised


def test_no_interval_takes_the_configured_default():
    from nbgpu import config

    config.reset()
    try:
        config.settings().interval = 0.7
        assert nbgpu.Sampler(source=SimulatedGPUs(), interval=None).interval == 0.7
    finally:
        config.reset()


def test_unknown_source_is_a_value_error():
    with pytest.raises(ValueError, match=r"unknown source 'cuda'.*'sim'"):
        nbgpu.Sampler(source="cuda")
    with pytest.raises(ValueError, match="source must be"):
        nbgpu.Sampler(source=42)


def test_gpu_index_out_of_range_is_a_value_error_and_releases_nvml():
    sim = SimulatedGPUs(count=2)
    with pytest.raises(ValueError, match=r"GPU index 7 is out of range.*2 GPU\(s\): 0 to 1"):
        nbgpu.Sampler(source=sim, gpus=[7])
    assert not sim.initialised


def test_marks_land_on_the_timeline(stepped):
    sim, clock = stepped.fake()
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    s.mark("epoch 1")
    clock.run(s, 0.2)
    s.stop()
    assert [label for _, label in s.timeline.marks()] == ["epoch 1"]


def test_same_seed_and_clock_give_the_same_readings():
    clock = iter(np.arange(1000.0, 2000.0, 0.05)).__next__

    def readings(seed: int) -> list[float]:
        t = [1000.0]
        sim = SimulatedGPUs(seed=seed, clock=lambda: t[0])
        sim.nvmlInit()
        h = sim.nvmlDeviceGetHandleByIndex(0)
        out = []
        for _ in range(30):
            t[0] = clock()
            out += [sim.nvmlDeviceGetPowerUsage(h), sim.nvmlDeviceGetMemoryInfo(h).used,
                    sim.nvmlDeviceGetUtilizationRates(h).gpu]
        return out

    a = readings(5)
    clock = iter(np.arange(1000.0, 2000.0, 0.05)).__next__
    assert readings(5) == a
    clock = iter(np.arange(1000.0, 2000.0, 0.05)).__next__
    assert readings(6) != a


def test_public_api_matches_all():
    for name in nbgpu.__all__:
        assert hasattr(nbgpu, name), name


def test_buffers_are_drained_on_their_own_schedule_and_on_request(stepped):
    sim, clock = stepped.fake(1)
    kinds = stepped.drains(sim)
    s = nbgpu.Sampler(source=sim, interval=0.1, energy_every_s=60, clock=clock)
    kinds.clear()
    for _ in range(41):  # a live view looks at the newest values every 0.3 s
        s.watch()
        clock.run(s, 0.3)
    # power (0) every 1 s, utilisation (1) every 5 s, memory-bandwidth utilisation (2) every 10 s
    assert 11 <= kinds.count(0) <= 14
    assert 3 <= kinds.count(1) <= 4
    assert 1 <= kinds.count(2) <= 2
    s.request("edge")
    before = len(kinds)
    clock.run(s, 0.15)
    assert set(kinds[before:]) == {0, 1, 2}  # an edge read drains every buffer at once
    s.stop()


def test_a_scheduled_energy_read_leaves_the_buffers_to_their_own_schedule(stepped):
    # Each utilisation drain costs ~2.5 ms on an H200 whatever it returns; the counter's
    # periodic read needs no buffer drained with it (only a capture's edge does).
    sim, clock = stepped.fake(1)
    kinds = stepped.drains(sim)
    s = nbgpu.Sampler(source=sim, interval=1.0, energy_every_s=3.0, clock=clock)
    clock.run(s, 1.0)
    energy_calls = sim.calls["nvmlDeviceGetTotalEnergyConsumption"]
    kinds.clear()
    clock.run(s, 30.0)
    s.stop()
    assert sim.calls["nvmlDeviceGetTotalEnergyConsumption"] - energy_calls >= 9
    assert 3 <= kinds.count(1) <= 4  # utilisation every 10 s (nobody watches live values)
    assert 3 <= kinds.count(2) <= 4  # memory-bandwidth utilisation every 10 s


def test_unselected_gpus_are_never_read(stepped):
    sim, clock = stepped.fake(4)
    read: list[int] = []
    original = sim.nvmlDeviceGetMemoryInfo

    def spy(h):
        read.append(h.gpu)
        return original(h)

    sim.nvmlDeviceGetMemoryInfo = spy
    s = nbgpu.Sampler(source=sim, gpus=[2], interval=0.1, clock=clock)
    read.clear()  # probing read every GPU once; sampling must not
    clock.run(s, 0.5)
    s.stop()
    assert read and set(read) == {2}


def test_drain_only_wakeups_make_no_cheap_reads(stepped):
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, interval=3.0, energy_every_s=60, procs_every_s=60, clock=clock)
    clock.run(s, 0.2)
    before = sim.calls["nvmlDeviceGetMemoryInfo"]
    clock.run(s, 2.2)  # two buffer-drain wake-ups, no tick
    assert sim.calls["nvmlDeviceGetMemoryInfo"] == before
    assert sim.calls["nvmlDeviceGetSamples"] >= 4
    s.stop()


def test_an_injected_read_error_is_counted_per_gpu_and_memory_reads_failed_not_live(stepped):
    sim, clock = stepped.fake(2)
    s = nbgpu.Sampler(source=sim, interval=0.5, clock=clock, host=False)
    clock.run(s, 2.0)
    good = s.latest()[0]["mem_used_bytes"]
    assert s.latest()[0]["states"]["mem_used_bytes"] == "live" and good > 0
    sim.inject_error("nvmlDeviceGetMemoryInfo", 999, gpu=0)
    clock.run(s, 2.0)
    st = s.status()
    assert st.errors == s.errors > 0 and st.errors_by_gpu.get(0, 0) > 0
    assert 1 not in st.errors_by_gpu
    assert "999" in s.last_error or "Unknown" in s.last_error
    assert st.last_error_by_gpu[0] == s.last_error
    row0, row1 = s.latest()
    assert row0["states"]["mem_used_bytes"] == "failed"
    assert math.isnan(row0["mem_used_bytes"]) and row0["last_good"]["mem_used_bytes"] > 0
    assert row0["states"]["temp_c"] == "live" and row0["temp_c"] > 0
    assert row1["states"]["mem_used_bytes"] == "live"
    s.stop()


def test_a_failing_read_marks_only_its_own_metrics_failed(stepped):
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, interval=0.5, clock=clock, host=False)
    clock.run(s, 2.0)
    sim.inject_error("nvmlDeviceGetTemperature", 999, gpu=0)
    clock.run(s, 12.0)  # past a drain of every sample buffer
    states = s.latest()[0]["states"]
    assert states["temp_c"] == "failed"
    others = {m: st for m, st in states.items() if m != "temp_c" and st != "live"}
    assert not others  # power, utilisation, memory ... read fine, so they stay live
    s.stop()


def test_a_metric_no_longer_refreshed_turns_stale_after_three_periods(stepped):
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, interval=0.5, clock=clock, host=False)
    clock.run(s, 3.0)
    # the source answers but stops reporting temperature (no error, no NotSupported)
    sim.nvmlDeviceGetTemperature = lambda h, sensor: float("nan")
    clock.run(s, 1.0)
    assert s.latest()[0]["states"]["temp_c"] == "live"
    clock.run(s, 1.0)
    row = s.latest()[0]
    assert row["states"]["temp_c"] == "stale" and math.isnan(row["temp_c"])
    assert row["last_good"]["temp_c"] > 0
    s.stop()


def test_fast_memory_adds_memory_reads_every_10_ms_only_while_held(stepped):
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, interval=0.5, clock=clock, host=False)
    clock.run(s, 1.0)
    before = sim.calls["nvmlDeviceGetMemoryInfo"]
    with s.fast_memory(0.01), s.fast_memory(0.05):  # nested: the fastest held lane wins
        clock.run(s, 0.5)
        during = sim.calls["nvmlDeviceGetMemoryInfo"] - before
    clock.run(s, 0.5)
    after = sim.calls["nvmlDeviceGetMemoryInfo"] - before - during
    assert 45 <= during <= 55
    assert after <= 2
    t, _ = s.timeline.series(0, "mem_used_bytes")
    t0 = stepped.T0
    assert np.median(np.diff(t[(t > t0 + 1.0) & (t < t0 + 1.5)])) == pytest.approx(0.01, abs=1e-6)
    s.stop()


def test_status_says_what_the_views_need_without_touching_the_source(stepped):
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, interval=0.5, clock=clock)
    clock.run(s, 1.0)
    st = s.status()
    assert st.state == "stopped" and st.ticks == 3 and st.errors == 0
    assert st.simulated and st.source_kind == "sim" and "simulated" in st.source_description
    s.stop()
    assert s.status().state == "closed"


def test_latest_time_follows_each_step_and_is_nat_before_any():
    now = [1_800_000_000.0]
    s = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=2, seed=0, clock=lambda: now[0]),
                      clock=lambda: now[0])
    try:
        before = s.latest()
        assert all(r["time"] is pd.NaT and math.isnan(r["time_s"]) for r in before)
        for t in (now[0], now[0] + 1.0, now[0] + 2.0):
            now[0] = t
            s.step(t)
            rows = s.latest()
            assert [r["time_s"] for r in rows] == [t, t]
            assert all(r["time"] == pd.Timestamp(t, unit="s", tz="UTC") for r in rows)
    finally:
        s.stop()
