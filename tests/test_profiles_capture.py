"""nbgpu.capture, mark and track on a running simulated sampler (no kernel needed)."""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import time
import types

import pytest

import nbgpu
from conftest_profiles import clean_profiles_fixture, sim_sampler_fixture  # noqa: F401 - fixtures
from nbgpu import Sampler, SimulatedGPUs, session
from nbgpu.errors import BadArgumentError
from nbgpu.profiles import report
from nbgpu.profiles.summary import integrate_power_j, summarize
from nbgpu.sampler import running_samplers


def test_capture_reuses_the_running_sampler(sim_sampler):
    threads = threading.active_count()
    with nbgpu.capture() as cap:
        time.sleep(0.6)
        assert threading.active_count() == threads  # no sampler of its own
    assert cap.sampler is sim_sampler and not cap.owns_sampler
    s = cap.summary
    assert list(s["gpu"]) == [0, 1]
    assert (s["status"] == "ok").all()
    # what the block spanned, however the threads were scheduled (a loaded machine sleeps longer)
    assert s["duration_s"].iloc[0] == pytest.approx(cap.end_time - cap.start_time, abs=0.01)
    assert s["duration_s"].iloc[0] >= 0.6 - 0.01
    tl = cap.timeline.to_pandas()
    assert set(tl["gpu"].dropna()) >= {0, 1}  # the capture's own edge reads, at least
    t0, t1 = (tl["time"].astype("int64") / 1e9).agg(["min", "max"])
    assert cap.start_time <= t0 and t1 <= cap.end_time


def test_capture_prefers_the_shared_sampler(sim_sampler):
    shared = session.ensure_sampler(SimulatedGPUs(count=1), 0.1)
    with nbgpu.capture() as cap:
        time.sleep(0.2)
    assert cap.sampler is shared
    assert list(cap.summary["gpu"]) == [0]


def test_capture_starts_and_stops_its_own_sampler(clean_profiles):
    assert running_samplers() == []
    with nbgpu.capture(source="sim", interval=0.1) as cap:
        time.sleep(0.5)
        assert cap.sampler.running
    assert cap.owns_sampler and not cap.sampler.running
    assert running_samplers() == []
    s = cap.summary
    assert len(s) == 2 and s["samples"].min() > 3
    assert (s["energy_source"] == "power").all()  # 0.5 s: too short for the counter's steps
    assert (s["energy_j"] > 0).all()


def test_energy_counter_agrees_with_integrated_power(sim_sampler):
    with nbgpu.capture() as cap:
        time.sleep(1.5)
    for _, row in cap.summary.iterrows():
        t, p = sim_sampler.timeline.series(row["gpu"], "power_w")
        integrated = integrate_power_j(t, p, cap.start_time, cap.end_time)
        assert row["energy_source"] == "counter"
        assert row["energy_j"] == pytest.approx(integrated, rel=0.02)


def test_exception_propagates_unchanged_and_is_recorded(sim_sampler):
    err = ValueError("boom")
    with pytest.raises(ValueError) as info, nbgpu.capture() as cap:
        raise err
    assert info.value is err
    assert cap.status == "failed" and "ValueError: boom" in cap.error
    assert (cap.summary["status"] == "failed").all()
    with pytest.raises(KeyboardInterrupt), nbgpu.capture() as cap2:
        raise KeyboardInterrupt
    assert cap2.status == "interrupted"


def test_nested_captures(sim_sampler):
    with nbgpu.capture(label="outer") as outer:
        time.sleep(0.3)
        with nbgpu.capture(label="inner") as inner:
            time.sleep(0.3)
        time.sleep(0.3)
    assert outer.start_time < inner.start_time < inner.end_time < outer.end_time
    # sleeps last at least what they ask; how much longer is the machine's load, not nbgpu's
    assert inner.duration_s == pytest.approx(inner.end_time - inner.start_time)
    assert inner.duration_s >= 0.3 - 0.01
    assert outer.duration_s >= inner.duration_s + 0.6 - 0.02
    assert (outer.summary["energy_j"] > inner.summary["energy_j"]).all()


def test_mark_reaches_every_running_sampler(sim_sampler):
    other = Sampler(SimulatedGPUs(count=1), interval=0.2).start()
    try:
        assert nbgpu.mark("checkpoint") is None  # no Out[] when it ends a cell
        for s in (sim_sampler, other):
            assert [label for _, label in s.timeline.marks()] == ["checkpoint"]
    finally:
        other.stop()


def test_track_marks_iterations_and_summarises_each(sim_sampler):
    with nbgpu.capture() as cap:
        tracker = nbgpu.track(range(3), label="epoch")
        seen = [i for i in tracker if time.sleep(0.25) is None]
    assert seen == [0, 1, 2]
    assert [label for _, label in cap.marks] == ["epoch 0", "epoch 1", "epoch 2"]
    rows = tracker.summary()
    assert len(rows) == 6  # 3 iterations x 2 GPUs
    assert list(rows["iteration"].unique()) == [0, 1, 2]
    assert (rows["duration_s"] >= 0.25 - 0.01).all()  # each iteration slept 0.25 s at least
    per_iter = tracker.summary(per_gpu=False)
    assert len(per_iter) == 3 and (per_iter["gpus"] == 2).all()
    assert len(cap.iterations) == 6


def test_track_records_a_loop_left_early(sim_sampler):
    tracker = nbgpu.track(["a", "b", "c"], label="step")
    with pytest.raises(RuntimeError):
        for item in tracker:
            if item == "b":
                raise RuntimeError("stop")
    assert [(i, status) for i, _, _, _, status in tracker.spans] == [(0, "done"), (1, "stopped")]


def test_alerts_overlapping_the_block_are_listed(clean_profiles):
    s = Sampler(SimulatedGPUs(count=1, scenario="throttle"), interval=0.1,
                thresholds={"throttle_window_s": 1.0, "eval_every_s": 0.2}).start()
    try:
        with nbgpu.capture() as cap:
            time.sleep(3.0)
    finally:
        s.stop()
    assert cap.alerts, "the throttle scenario should raise an alert"
    assert all(a.start <= cap.end_time for a in cap.alerts)
    assert cap.summary["alerts"].iloc[0]
    assert "sw_power_cap" in cap.summary["throttle_reasons"].iloc[0]


def test_mig_slices_follow_their_card_and_are_not_counted_twice(clean_profiles):
    s = Sampler(SimulatedGPUs(count=2, mig={1: 2}), interval=0.1).start()
    try:
        time.sleep(0.3)
        with nbgpu.capture(gpus=[1]) as cap:
            time.sleep(0.4)
    finally:
        s.stop()
    assert cap.summary["gpu"].tolist() == [1, "1/0", "1/1"]
    assert math.isnan(cap.summary["util_mean_pct"].iloc[0])  # not supported in MIG mode: NaN, not 0
    totals = cap.totals
    assert totals["gpus"] == 1
    assert totals["mem_peak_bytes"] == cap.summary["mem_peak_bytes"].iloc[0]
    assert cap.one_line().startswith("GPU1 ")


def _stepped(sim, clock, until: float, fast: bool) -> Sampler:
    """A sampler over ``sim`` stepped every 5 ms of fake time up to ``until``."""
    s = Sampler(sim, interval=0.5, clock=clock, diagnostics=False)
    lane = s.fast_memory(0.01) if fast else contextlib.nullcontext()
    with lane:
        while clock.now < until:
            s.step(clock.now)
            clock.now += 0.005
    return s


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("fast", [True, False])
def test_a_60ms_spike_reaches_the_peak_only_with_the_fast_memory_lane(fast):
    t0 = 1_800_000_000.0
    peaks = []
    for spike in (False, True):  # the same simulated run without and with the spike
        clock = _Clock(t0)
        sim = SimulatedGPUs(count=1, seed=2, clock=clock)
        if spike:
            sim.add_memory_spike(0, at=t0 + 1.23, seconds=0.06, extra_bytes=16 * 2**30)
        s = _stepped(sim, clock, t0 + 2.0, fast)
        row = summarize(s.timeline, t0 + 1.2, t0 + 1.32).rows[0]
        peaks.append(row["mem_peak_bytes"])
    caught = peaks[1] - peaks[0] > 14 * 2**30
    assert caught is fast  # ticks every 0.5 s alone miss it: why captures hold the lane
    assert row["mem_peak_source"] == "nvml"


class _FakeCuda:
    """Stand-in for torch.cuda: one device whose allocator reserved 16 GiB for a moment."""

    def __init__(self) -> None:
        self.reserved = 2 * 2**30
        self.peak_reserved = self.reserved

    def is_initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def max_memory_allocated(self, i: int) -> int:
        return self.peak_reserved - 2**20

    def max_memory_reserved(self, i: int) -> int:
        return self.peak_reserved

    def memory_allocated(self, i: int) -> int:
        return self.reserved - 2**20

    def memory_reserved(self, i: int) -> int:
        return self.reserved

    def reset_peak_memory_stats(self, i: int) -> None:
        self.peak_reserved = self.reserved

    def get_device_properties(self, i: int):
        raise RuntimeError("no properties in the fake")

    def spike(self, extra: int) -> None:
        self.peak_reserved = max(self.peak_reserved, self.reserved + extra)


def test_the_allocator_peak_is_folded_in_and_named(clean_profiles, monkeypatch):
    cuda = _FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    s = Sampler(SimulatedGPUs(count=1, seed=1), interval=0.1).start()
    try:
        with nbgpu.capture() as cap:
            cuda.spike(16 * 2**30)  # allocated and freed between two memory reads
        row = cap.summary_rows[0]
        # The peak: what NVML counted outside PyTorch at the start + the allocator's peak.
        outside = row["mem_start_bytes"] - 2 * 2**30
        assert row["mem_peak_bytes"] >= outside + 18 * 2**30
        assert row["mem_peak_source"] == "allocator"
        assert row["torch_peak_reserved_bytes"] == 18 * 2**30
        assert cap.totals["mem_peak_bytes"] >= row["mem_peak_bytes"]
        assert "(allocator)" in report.summary_html(cap.summary_rows)
    finally:
        s.stop()


def test_capture_with_a_source_while_another_sampler_runs_says_so(sim_sampler):
    with pytest.raises(BadArgumentError, match="already running"), nbgpu.capture(source="sim"):
        pass
