"""nbgpu.capture, mark and track on simulated samplers (no kernel needed).

Most samplers here share a fake clock with their simulated GPUs: history is stepped by hand
before the sampler starts, then a block lasts exactly the fake time the test moves, and the
sampler's thread only steps at the times the test set (``advance``, ``settle``, ``held``). What
only a real clock shows (a capture's own sampler, the kernel's shared one) runs on it, and
no test waits by sleeping.
"""

from __future__ import annotations

import contextlib
import math
import sys
import threading
import types
from collections.abc import Iterator

import pytest

import nbgpu
from conftest_profiles import clean_profiles_fixture  # noqa: F401 - fixture
from nbgpu import Sampler, SimulatedGPUs, session
from nbgpu.errors import BadArgumentError
from nbgpu.profiles import render as report
from nbgpu.profiles.energy import integrate_power_j
from nbgpu.profiles.summary import summarize
from nbgpu.sampler_thread import running_samplers

SETTLE_TIMEOUT_S = 10.0  # a sampler thread that takes no step in this long is broken, not slow


@contextlib.contextmanager
def held(s: Sampler) -> Iterator[None]:
    """Hold the sampler's thread inside a step while the test moves the clock and asks for reads.

    Released, the thread serves them in its next step, at the new time, and nothing is read
    at that time before them (a stream keeps one row per time: a tick taken there first
    would leave no room for a counter reading asked for after it).
    """
    inside, release = threading.Event(), threading.Event()

    def hold(_sampler: Sampler, _now: float) -> None:
        inside.set()
        release.wait(SETTLE_TIMEOUT_S)

    s.add_listener(hold)
    try:
        assert inside.wait(SETTLE_TIMEOUT_S), "the sampler thread took no step"
    finally:
        s.remove_listener(hold)  # one step held, no more
    try:
        yield
    finally:
        release.set()


def started(sim: SimulatedGPUs, clock, history_s: float = 1.0, **kwargs) -> Sampler:
    """A sampler over ``sim`` ticking every 0.1 s on ``clock``, stepped by hand for ``history_s``, started."""
    s = Sampler(source=sim, interval=0.1, clock=clock, **kwargs)
    clock.run(s, history_s)
    s.start()
    clock.settle(s)
    return s


@pytest.fixture(name="fake_sampler")
def fake_sampler_fixture(clean_profiles, stepped) -> Iterator[tuple[Sampler, object]]:
    """A running sampler over 2 simulated GPUs on a fake clock, with a second of history."""
    clock = stepped.new_clock()
    s = started(SimulatedGPUs(count=2, seed=1, clock=clock), clock)
    yield s, clock
    s.stop()


def test_capture_reuses_the_running_sampler(fake_sampler):
    s, clock = fake_sampler
    threads = threading.active_count()
    with nbgpu.capture() as cap:
        clock.advance(s, 0.6)
        assert threading.active_count() == threads  # no sampler of its own
    clock.settle(s)
    assert cap.sampler is s and not cap.owns_sampler
    summary = cap.summary
    assert list(summary["gpu"]) == [0, 1]
    assert (summary["status"] == "ok").all()
    assert cap.duration_s == pytest.approx(0.6, abs=1e-6)
    assert summary["duration_s"].tolist() == pytest.approx([0.6, 0.6], abs=1e-6)
    assert summary["samples"].tolist() == [30, 30]  # every 20 ms power sample, drained at the end
    tl = cap.timeline.to_pandas()
    assert set(tl["gpu"].dropna()) == {0, 1}
    times = tl["time"].astype("int64") / 1e9
    assert cap.start_time - 1e-6 <= times.min()
    assert times.max() == pytest.approx(cap.end_time, abs=1e-6)  # the end's edge read is in


def test_capture_prefers_the_shared_sampler(clean_profiles, stepped):
    """The kernel's shared sampler wins over a running sampler started after it.

    ``session.ensure_sampler`` builds its sampler on the real clock; the block only needs
    its thread to answer the end's edge read, which ``finish`` waits for.
    """
    shared = session.ensure_sampler(SimulatedGPUs(count=1), 0.1)
    clock = stepped.new_clock(shared.started_at + 60.0)
    newer = started(SimulatedGPUs(count=2, clock=clock), clock)
    try:
        with nbgpu.capture() as cap:
            pass
    finally:
        newer.stop()
    assert cap.sampler is shared
    assert list(cap.summary["gpu"]) == [0]


def test_capture_starts_and_stops_its_own_sampler(clean_profiles):
    """With none running, capture builds a sampler for the block (on the real clock: it takes no other)."""
    assert running_samplers() == []
    with nbgpu.capture(source="sim", interval=0.1) as cap:
        assert cap.sampler.running and running_samplers() == [cap.sampler]
    assert cap.owns_sampler and not cap.sampler.running
    assert running_samplers() == []
    assert list(cap.summary["gpu"]) == [0, 1]


def test_a_stopped_sampler_given_to_capture_runs_for_the_block_only(clean_profiles, stepped):
    """The block's readings come from a sampler capture started, and its stop drained them all."""
    clock = stepped.new_clock()
    s = Sampler(source=SimulatedGPUs(count=2, seed=1, clock=clock), interval=0.1, clock=clock)
    clock.run(s, 1.0)
    with nbgpu.capture(sampler=s) as cap:
        assert s.running
        clock.advance(s, 0.5)
    assert cap.owns_sampler and not s.running
    summary = cap.summary
    assert summary["duration_s"].tolist() == pytest.approx([0.5, 0.5], abs=1e-6)
    assert summary["samples"].tolist() == [25, 25]  # every 20 ms power sample of the block
    assert (summary["energy_source"] == "power").all()  # 0.5 s: too short for the counter's steps
    assert (summary["energy_j"] > 0).all()
    assert summary["energy_j"].tolist() == pytest.approx((summary["power_mean_w"] * 0.5).tolist(), rel=1e-3)


def test_energy_counter_agrees_with_integrated_power(fake_sampler):
    s, clock = fake_sampler
    cap = nbgpu.capture(sampler=s).start()
    with held(s):  # the end's counter reading is the first read at the end
        clock.t += 1.5
        cap.finish(wait=False)
    clock.settle(s)
    assert cap.duration_s == pytest.approx(1.5, abs=1e-6)
    for _, row in cap.summary.iterrows():
        t, p = s.timeline.series(row["gpu"], "power_w")
        integrated = integrate_power_j(t, p, cap.start_time, cap.end_time)
        assert row["energy_source"] == "counter"
        assert row["energy_j"] == pytest.approx(integrated, rel=0.02)


def test_exception_propagates_unchanged_and_is_recorded(fake_sampler):
    s, clock = fake_sampler
    err = ValueError("boom")
    with pytest.raises(ValueError) as info, nbgpu.capture(sampler=s) as cap:
        clock.advance(s, 0.1)
        raise err
    assert info.value is err
    assert cap.status == "failed" and "ValueError: boom" in cap.error
    assert (cap.summary["status"] == "failed").all()
    with pytest.raises(KeyboardInterrupt), nbgpu.capture(sampler=s) as cap2:
        raise KeyboardInterrupt
    assert cap2.status == "interrupted"


def test_nested_captures(fake_sampler):
    s, clock = fake_sampler
    with nbgpu.capture(sampler=s) as outer:
        clock.advance(s, 0.3)
        with nbgpu.capture(sampler=s) as inner:
            clock.advance(s, 0.3)
        clock.settle(s)  # the inner end's edge read, before time moves on
        clock.advance(s, 0.3)
    clock.settle(s)
    assert outer.start_time < inner.start_time < inner.end_time < outer.end_time
    assert inner.start_time - outer.start_time == pytest.approx(0.3, abs=1e-6)
    assert inner.duration_s == pytest.approx(0.3, abs=1e-6)
    assert outer.duration_s == pytest.approx(0.9, abs=1e-6)
    assert (outer.summary["energy_j"] > inner.summary["energy_j"]).all()


def test_mark_reaches_every_running_sampler(fake_sampler, stepped):
    s, clock = fake_sampler
    other_clock = stepped.new_clock(stepped.T0 + 3600.0)
    other = Sampler(SimulatedGPUs(count=1, clock=other_clock), interval=0.2, clock=other_clock).start()
    try:
        assert nbgpu.mark("checkpoint") is None  # no Out[] when it ends a cell
        assert s.timeline.marks() == [(clock.t, "checkpoint")]  # each on its sampler's clock
        assert other.timeline.marks() == [(other_clock.t, "checkpoint")]
    finally:
        other.stop()


def test_track_marks_iterations_and_summarises_each(fake_sampler):
    s, clock = fake_sampler  # the tracker stamps its iterations with its sampler's clock
    seen = []
    with nbgpu.capture(sampler=s) as cap:
        tracker = nbgpu.track(range(3), label="epoch")
        for i in tracker:
            seen.append(i)
            clock.advance(s, 0.25)
    clock.settle(s)
    assert seen == [0, 1, 2]
    assert [label for _, label in cap.marks] == ["epoch 0", "epoch 1", "epoch 2"]
    mark_times = [t - cap.start_time for t, _ in cap.marks]
    assert mark_times == pytest.approx([0.0, 0.25, 0.5], abs=1e-6)
    rows = tracker.summary()
    assert len(rows) == 6  # 3 iterations x 2 GPUs
    assert list(rows["iteration"].unique()) == [0, 1, 2]
    assert rows["duration_s"].tolist() == pytest.approx([0.25] * 6, abs=1e-6)
    assert (rows["energy_source"] == "power").all() and (rows["energy_j"] > 0).all()
    per_iter = tracker.summary(per_gpu=False)
    assert len(per_iter) == 3 and (per_iter["gpus"] == 2).all()
    assert len(cap.iterations) == 6


def test_track_summary_right_after_the_loop_has_the_last_iterations_buffered_readings(fake_sampler):
    """Utilisation comes from NVML's sample buffer, read every few seconds: a summary asked for
    right after the loop fetches the last iteration's samples instead of finding none."""
    s, clock = fake_sampler
    tracker = nbgpu.track(range(3), label="epoch")
    for _ in tracker:
        clock.advance(s, 1.0)
    rows = tracker.summary()
    last = rows[rows["iteration"] == 2]
    assert last["util_mean_pct"].notna().all(), last[["gpu", "util_mean_pct", "resolution_note"]]
    assert not last["resolution_note"].str.contains("utilisation").any(), last["resolution_note"].tolist()


def test_track_records_a_loop_left_early(fake_sampler):
    tracker = nbgpu.track(["a", "b", "c"], label="step")
    with pytest.raises(RuntimeError):
        for item in tracker:
            if item == "b":
                raise RuntimeError("stop")
    assert [(i, status) for i, _, _, _, status in tracker.spans] == [(0, "done"), (1, "stopped")]


def test_alerts_overlapping_the_block_are_listed(clean_profiles, stepped):
    """The throttle scenario's alert is raised at the first evaluation inside the block."""
    clock = stepped.new_clock()
    s = started(SimulatedGPUs(count=1, scenario="throttle", clock=clock), clock, history_s=0.1,
                thresholds={"throttle_window_s": 1.0, "eval_every_s": 0.2})
    try:
        with nbgpu.capture(sampler=s) as cap:
            clock.advance(s, 0.5)
        clock.settle(s)
    finally:
        s.stop()
    assert cap.alerts, "the throttle scenario should raise an alert"
    assert all(cap.start_time <= a.start <= cap.end_time for a in cap.alerts)
    assert cap.summary["alerts"].iloc[0]
    assert "sw_power_cap" in cap.summary["throttle_reasons"].iloc[0]


def test_mig_slices_follow_their_card_and_are_not_counted_twice(clean_profiles, stepped):
    clock = stepped.new_clock()
    s = started(SimulatedGPUs(count=2, mig={1: 2}, clock=clock), clock, history_s=0.3)
    try:
        with nbgpu.capture(sampler=s, gpus=[1]) as cap:
            clock.advance(s, 0.4)
        clock.settle(s)
    finally:
        s.stop()
    assert cap.summary["gpu"].tolist() == [1, "1/0", "1/1"]
    assert cap.duration_s == pytest.approx(0.4, abs=1e-6)
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
        while clock.t < until:
            s.step(clock.t)
            clock.t += 0.005
    return s


@pytest.mark.parametrize("fast", [True, False])
def test_a_60ms_spike_reaches_the_peak_only_with_the_fast_memory_lane(fast, stepped):
    t0 = 1_800_000_000.0
    peaks = []
    for spike in (False, True):  # the same simulated run without and with the spike
        clock = stepped.new_clock(t0)
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


def test_the_allocator_peak_is_folded_in_and_named(clean_profiles, monkeypatch, stepped):
    cuda = _FakeCuda()
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    clock = stepped.new_clock()
    s = started(SimulatedGPUs(count=1, seed=1, clock=clock), clock)
    try:
        with nbgpu.capture(sampler=s) as cap:
            cuda.spike(16 * 2**30)  # allocated and freed between two memory reads
            clock.advance(s, 0.1)
        clock.settle(s)
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


def test_capture_with_a_source_while_another_sampler_runs_says_so(fake_sampler):
    with pytest.raises(BadArgumentError, match="already running"), nbgpu.capture(source="sim"):
        pass


def test_a_summary_whose_buffered_samples_are_not_read_yet_says_so(fake_sampler):
    """Asked before the sampler read NVML's buffers (no fetch: a plain summarize right after
    the block), the note names that reason, not a block shorter than the sampling interval."""
    s, clock = fake_sampler
    t0 = clock.t
    for _ in range(10):
        clock.advance(s, 0.1)
    note = summarize(s.timeline, t0 + 0.05, clock.t).rows[0]["resolution_note"]
    assert "utilisation: 0 sample(s)" in note and "not yet read from NVML's buffer" in note, note
    assert "shorter than the sampling interval" not in note
