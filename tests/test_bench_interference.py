"""The interference benchmark's estimator on synthetic step series, and short real runs of it.

Synthetic series come from ``benchmarks/synthetic_steps.py`` with fixed seeds: 600 µs steps
drifting by ±30 %, jitter on top, wake-ups at random times. Pass or fail never depends on thread scheduling:
the real runs check structure only.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import stats  # noqa: E402
from benchmarks.synthetic_steps import STEP_S, drifting_steps, mark_random_events, series  # noqa: E402


def test_injected_excess_is_recovered_within_10_percent_and_its_interval_holds_the_truth() -> None:
    rng = np.random.default_rng(1)
    dur = drifting_steps(60.0, rng)
    hit = mark_random_events(dur, 20.0, rng)
    dur[hit] += 300e-6
    truth = 100.0 * len(hit) * 300e-6 / (dur.sum() - len(hit) * 300e-6)
    res = stats.excess_slowdown(*series(dur, hit))
    assert truth == pytest.approx(0.6, abs=0.1)
    assert res["slowdown_pct"] == pytest.approx(truth, rel=0.10)
    lo, hi = res["ci95_pct"]
    assert lo <= truth <= hi
    assert hi - lo < 0.2 * truth  # resolves far better than the 0.5 % target


def test_no_effect_gives_an_interval_containing_zero() -> None:
    rng = np.random.default_rng(2)
    dur = drifting_steps(60.0, rng)
    res = stats.excess_slowdown(*series(dur, mark_random_events(dur, 20.0, rng)))
    lo, hi = res["ci95_pct"]
    assert lo <= 0.0 <= hi
    assert hi - lo < 0.1


def test_skewed_jitter_mean_baseline_is_unbiased_where_a_median_one_is_not() -> None:
    rng = np.random.default_rng(3)
    dur = drifting_steps(60.0, rng, jitter="exponential")
    hit = np.arange(5, len(dur), 37)  # marked without regard to length: no length bias here
    end_ns, cpu_ns = series(dur, hit)
    mean = stats.excess_slowdown(end_ns, cpu_ns, length_bias=False)
    median = stats.excess_slowdown(end_ns, cpu_ns, length_bias=False, baseline="median")
    assert mean["ci95_pct"][0] <= 0.0 <= mean["ci95_pct"][1]
    assert median["ci95_pct"][0] > 0.0  # ordinary jitter counted as excess
    # per touched step the median baseline is short of the mean by mean − median of the jitter
    expected = 100.0 * mean["touched_steps"] * STEP_S * 0.2 * (1 - math.log(2)) / mean["wall_s"]
    assert median["slowdown_pct"] == pytest.approx(expected, rel=0.25)


def test_length_bias_of_randomly_timed_wakeups_is_corrected() -> None:
    rng = np.random.default_rng(4)
    dur = drifting_steps(60.0, rng, sigma=0.5)  # heavy jitter: long steps are hit far more often
    end_ns, cpu_ns = series(dur, mark_random_events(dur, 20.0, rng))
    raw = stats.excess_slowdown(end_ns, cpu_ns, length_bias=False)
    fixed = stats.excess_slowdown(end_ns, cpu_ns)
    assert raw["ci95_pct"][0] > 0.0
    assert fixed["ci95_pct"][0] <= 0.0 <= fixed["ci95_pct"][1]
    assert fixed["length_bias_s"] > 0.0


def test_length_bias_of_spill_steps_under_speed_switches_is_corrected() -> None:
    """Speed switching every 0.25 s (as on the H200): wake-ups land in slow stretches more often,
    so the steps after the one they land in are long too; a correction of the first step alone
    left +0.04…+0.14 % here."""
    rng = np.random.default_rng(0)
    n = int(60.0 / STEP_S)
    level = np.repeat(rng.uniform(0.7, 1.3, n // 416 + 2), 416)[:n]
    dur = STEP_S * level * rng.lognormal(0.0, 0.1, n) / math.exp(0.005)
    res = stats.excess_slowdown(*series(dur, mark_random_events(dur, 50.0, rng)))
    assert res["ci95_pct"][0] <= 0.0 <= res["ci95_pct"][1]


def test_touched_steps_from_a_cpu_clock_series() -> None:
    cpu = [0, 0, 5, 5, 5, 9, 12, 12, 12, 12, 12]  # clock advanced in steps 2, 5 and 6
    direct, starts = stats.touched_steps(cpu, spill_steps=0)
    assert np.flatnonzero(direct).tolist() == [1, 4, 5]  # 0-based: steps 2, 5, 6
    assert np.flatnonzero(starts).tolist() == [1, 4]  # steps 5 and 6 are one run
    touched, starts2 = stats.touched_steps(cpu, spill_steps=2)
    assert np.flatnonzero(touched).tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert starts2.tolist() == starts.tolist()
    assert not stats.touched_steps([3, 3, 3], spill_steps=5)[0].any()
    with pytest.raises(ValueError, match="spill_steps"):
        stats.touched_steps(cpu, spill_steps=-1)


def test_step_excess_uses_only_untouched_neighbours_within_the_window() -> None:
    dur = np.full(1000, 1e-3)
    dur[500:] = 2e-3  # the loop halves its speed at 0.5 s
    dur[[200, 800]] += 0.5e-3
    touched = np.zeros(1000, dtype=bool)
    touched[[200, 800]] = True
    end_ns = np.concatenate(([0], np.cumsum(np.round(dur * 1e9).astype(np.int64))))
    ex = stats.step_excess(end_ns, touched, window_s=0.1)
    assert ex["excess_s"][[200, 800]] == pytest.approx([0.5e-3, 0.5e-3])
    assert ex["excess_s"].sum() == pytest.approx(1e-3)
    lonely = stats.step_excess(end_ns[:12], np.ones(11, dtype=bool), window_s=0.1)
    assert lonely["unbaselined"].all() and not lonely["excess_s"].any()


def test_block_bootstrap_interval_brackets_the_ratio() -> None:
    rng = np.random.default_rng(5)
    e = rng.normal(0.005, 0.001, 60)
    w = np.ones(60)
    lo, hi = stats.block_bootstrap_ratio_pct(e, w)
    point = 100 * e.sum() / (w.sum() - e.sum())
    assert lo < point < hi
    assert all(math.isnan(v) for v in stats.block_bootstrap_ratio_pct(e[:3], w[:3]))


def test_recorder_marks_the_steps_a_watched_thread_ran_in() -> None:
    """A thread that burns CPU only while an event is set: the marks follow the event, not timing."""
    from benchmarks.step_recorder import ThreadClocks, record_steps, thread_ids

    go, stop = threading.Event(), threading.Event()

    def worker() -> None:
        while not stop.is_set():
            if go.wait(0.01):
                sum(range(2000))

    before = thread_ids()
    t = threading.Thread(target=worker, name="burner", daemon=True)
    t.start()
    try:
        clocks = ThreadClocks.new_since(before)
        assert "burner" in clocks.names
        rec_idle = record_steps(lambda: time.sleep(0.001), clocks.clocks, 0.05, 10_000)
        go.set()
        rec_busy = record_steps(lambda: time.sleep(0.001), clocks.clocks, 0.2, 10_000)
    finally:
        stop.set()
        go.set()
        t.join()
    assert len(rec_idle.end_ns) == len(rec_idle.cpu_ns) >= 3
    assert np.all(np.diff(rec_busy.end_ns) > 0)
    assert rec_busy.cpu_ns[-1] > rec_busy.cpu_ns[0]
    assert not rec_busy.truncated
    # Each clock's own readings at the span's ends, the first the very ones of mark 0.
    assert sum(rec_busy.first_ns.values()) == rec_busy.cpu_ns[0]
    assert sum(rec_busy.last_ns.values()) >= rec_busy.cpu_ns[-1]
    assert set(rec_busy.first_ns) == set(rec_busy.last_ns) == set(clocks.clocks)
    _wait_until_clock_gone(clocks.clocks[0])  # join returns before the OS thread exits
    gone = record_steps(lambda: None, clocks.clocks, 0.01, 100)  # the thread has ended
    assert gone.threads_ended == 1 and len(gone.end_ns) >= 2
    assert gone.first_ns == gone.last_ns == {}  # an ended thread has no share to report


def _wait_until_clock_gone(clock: int, limit_s: float = 10.0) -> None:
    """Wait (bounded) until a thread's CPU clock can no longer be read: the OS thread is gone."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            time.clock_gettime_ns(clock)
        except OSError:
            return
        time.sleep(0.001)
    raise AssertionError("the ended thread's CPU clock stayed readable for 10 s")


def test_a_watched_thread_ending_mid_span_is_dropped_and_its_step_marked() -> None:
    from benchmarks.step_recorder import ThreadClocks, record_steps, thread_ids

    stop = threading.Event()
    before = thread_ids()
    t = threading.Thread(target=stop.wait, name="short-lived", daemon=True)
    t.start()
    clocks = ThreadClocks.new_since(before)
    count = [0]

    def step() -> None:
        count[0] += 1
        if count[0] == 20:  # the 20th step ends the thread
            stop.set()
            t.join()
            _wait_until_clock_gone(clocks.clocks[0])  # join returns before the OS thread exits

    rec = record_steps(step, clocks.clocks, 0.05, 100_000)
    assert rec.threads_ended == 1
    assert rec.cpu_ns[20] > rec.cpu_ns[19]  # the step that noticed counts as touched
    assert np.all(np.diff(rec.cpu_ns[21:]) == 0)


def _short_run(arm: str) -> dict:
    import nbgpu
    from benchmarks import gpu_interference as gi
    from benchmarks.gpu_loops import CpuSmallOps

    factories = gi.arm_factories([0], lambda: nbgpu.SimulatedGPUs(count=1, seed=0),
                                 lambda: nbgpu.SimulatedGPUs(count=1, seed=0))
    return gi.measure_all(CpuSmallOps(), factories, [arm], seconds=3.0, warmup_s=0.3)


@pytest.mark.parametrize("arm, thread", [("control", "control-monitor"), ("nbgpu", "nbgpu-sampler")])
def test_real_short_run_structure(arm: str, thread: str) -> None:
    res = _short_run(arm)
    assert res["skipped"] == {}
    a = res["arms"][arm]
    assert thread in a["threads"]
    assert a["steps"] > 100 and a["wall_s"] > 2.5
    assert 0 <= a["touched_steps"] <= a["steps"] and 0.0 <= a["touched_fraction"] <= 1.0
    assert len(a["ci95_pct"]) == 2 and all(math.isfinite(v) for v in a["ci95_pct"])
    assert math.isfinite(a["slowdown_pct"]) and a["threads_cpu_s_per_s"] >= 0.0
    each = a["thread_cpu_s_per_s"]  # each thread's share, read over the same span
    assert thread in each and all(v >= 0.0 for v in each.values())
    assert sum(each.values()) == pytest.approx(a["threads_cpu_s_per_s"], rel=0.05, abs=2e-5)
    assert a["recording_cost_ns_per_step"] > 0
    assert [(s["spill_steps"], s["window_s"]) for s in a["sensitivity"]] == [
        (0, 0.2), (1, 0.2), (4, 0.2), (2, 0.1), (2, 0.5)]
    assert len(a["segment_excess_s"]) == len(a["segment_wall_s"]) >= 4
    if arm == "nbgpu":
        assert a["monitor_facts"]["ticks"] >= 1


def test_a_failing_arm_is_reported_and_the_others_still_run() -> None:
    from benchmarks import gpu_interference as gi
    from benchmarks.gpu_loops import CpuSmallOps

    def broken():
        raise RuntimeError("no such GPU")

    factories = {"nbgpu": broken, "control": lambda: gi.PeriodicControlMonitor(0.5)}
    res = gi.measure_all(CpuSmallOps(), factories, ["nbgpu", "control"], seconds=0.5, warmup_s=0.1)
    assert res["skipped"] == {"nbgpu": "failed: RuntimeError: no such GPU"}
    assert "control" in res["arms"]
    out = gi.build_outcome(res, "test", True, None, {})
    assert any("nbgpu: not measured (failed: RuntimeError: no such GPU)" in n for n in out.notes)
    assert any("cannot see" in n for n in out.notes)


def test_arm_selection_and_seconds_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import gpu_interference as gi

    monkeypatch.setenv("NBGPU_BENCH_ARMS", "control, nbgpu")
    monkeypatch.setenv("NBGPU_BENCH_SECONDS", "7")
    assert gi.wanted_arms() == ["control", "nbgpu"]
    assert gi.arm_seconds("gpu", quick=True) == 7.0
    monkeypatch.setenv("NBGPU_BENCH_ARMS", "nbgpu,bogus")
    with pytest.raises(ValueError, match="unknown arm"):
        gi.wanted_arms()
    monkeypatch.delenv("NBGPU_BENCH_SECONDS")
    assert gi.arm_seconds("gpu", quick=False) == gi.SECONDS["gpu"]


def test_targets_trust_the_run_only_when_the_null_arms_show_no_bias() -> None:
    from benchmarks import gpu_interference as gi

    def arm(pct: float, lo: float, hi: float) -> dict:
        return {"slowdown_pct": pct, "ci95_pct": [lo, hi], "threads_cpu_s_per_s": 0.001,
                "recording_cost_pct": 0.1, "recording_cost_ns_per_step": 600.0, "threads": ["t"],
                "sensitivity": [], "touched_fraction": 0.01, "steps": 1000,
                "median_baseline_slowdown_pct": pct, "no_length_bias_slowdown_pct": pct,
                "loop_gc_s_per_s": 0.0, "late_threads": [], "unbaselined_steps": 0, "truncated": False}

    res = {"arms": {"control": arm(0.01, -0.02, 0.03), "null_50hz": arm(0.2, 0.1, 0.3),
                    "nbgpu": arm(0.2, 0.1, 0.3), "naive_50hz": arm(1.2, 1.0, 1.4)}, "skipped": {}}
    out = gi.build_outcome(res, "t", True, ("old.json", {"nbgpu": {"slowdown_pct": 1.0,
                                                                   "ci95_pct": [-2.0, 4.0]}}), {})
    met = {t.name.split(",")[0]: t.met for t in out.targets}
    assert met["control arm's 95 % interval contains 0 or lies within ±0.05 %"] is True
    assert met["null_50hz arm's 95 % interval contains 0 or lies within ±0.05 %"] is False
    assert met["nbgpu slowdown"] is True and met["nbgpu slowdown / naive 50 Hz slowdown"] is True
    nbgpu_target = next(t for t in out.targets if t.name.startswith("nbgpu slowdown,"))
    assert "method is biased" in nbgpu_target.note
    assert any("ABBA (old.json)" in n and "intervals overlap" in n for n in out.notes)


def test_gpu_path_on_cpu_torch_builds_targets_and_the_abba_cross_check(tmp_path: Path) -> None:
    """The GPU benchmark's loop and outcome, run on CPU torch: one short arm, then the targets."""
    pytest.importorskip("torch")
    import json

    from benchmarks import gpu_interference as gi
    from benchmarks.gpu_loops import LaunchBound

    res = gi.measure_all(LaunchBound(["cpu"]), {"control": lambda: gi.PeriodicControlMonitor(0.5)},
                         ["control"], seconds=1.0, warmup_s=0.1)
    assert res["skipped"] == {} and res["arms"]["control"]["steps"] > 10
    abba = {"control": {"slowdown_pct": 0.5, "ci95_pct": [-3.0, 4.0]}}
    (tmp_path / "old.json").write_text(json.dumps({
        "device": "GPU X", "started_utc": "2026-01-01T00:00:00+00:00",
        "benchmarks": {"gpu_overhead": {"status": "ok", "raw": {"launch_bound": {"arms": abba}}}}}))
    ref = gi.abba_reference("GPU X", tmp_path)
    assert ref == ("old.json", abba)
    assert gi.abba_reference("GPU Y", tmp_path) is None
    out = gi.build_outcome(res, "launch-bound", True, ref, {})
    assert [t.name.split(",")[0] for t in out.targets] == [
        "control arm's 95 % interval contains 0 or lies within ±0.05 %"]
    assert any(n.startswith("control: this method") and "ABBA (old.json)" in n for n in out.notes)


@pytest.mark.parametrize("arm, util_drains", [("nbgpu", (4, 5)), ("nbgpu_watched", (8, 9))])
def test_the_watched_arm_drains_as_an_open_panel_does_and_the_plain_arm_does_not(
        arm, util_drains, stepped) -> None:
    # The watched arm is the panel arm less its refresh: its sampler must keep the buffers
    # live as a panel's refresh does (utilisation every 5 s), the plain one must not (10 s).
    import nbgpu
    from benchmarks import gpu_interference as gi

    sim, clock = stepped.fake(1)
    monitor = gi.arm_factories([0], None, lambda: sim)[arm]()
    assert monitor.name == arm
    s = nbgpu.Sampler(source=sim, energy_every_s=600, clock=clock)
    monitor._before_start(s)  # what start() does between making the sampler and starting it
    clock.run(s, 5.0)
    kinds = stepped.drains(sim)
    clock.run(s, 40.0)
    s.stop()
    lo, hi = util_drains
    assert lo <= kinds.count(1) <= hi


def test_per_thread_cpu_sums_threads_of_one_name_and_leaves_out_ended_ones() -> None:
    from benchmarks import gpu_interference as gi

    each = gi.per_thread(["a", "b", "a", "c"], [0, 10, 100, None], [2_000_000, 10, 1_100_100, 5], 2.0)
    assert each == pytest.approx({"a": 0.00155, "b": 0.0})  # (2 ms + 1 ms) over 2 s


def test_the_panel_arm_measures_a_panel_open_for_a_while_not_a_fresh_one() -> None:
    # The arm fills the store with a window of history so that its panel does the steady
    # state's work; a sampler started just now made the panel draw a growing span instead
    # (new buckets, so a whole read of the window, at every step up of the span).
    import nbgpu
    from benchmarks.monitors import NbgpuPanelMonitor

    monitor = NbgpuPanelMonitor(nbgpu.SimulatedGPUs(count=1, seed=0), [0])
    if not monitor.available:
        pytest.skip(monitor.reason)
    monitor.start()
    try:
        panel = monitor.driver.panel
        panel.refresh(force=True)
        assert panel.drawn_span_s == panel.window_s == monitor.panel_api.default_window_s()
    finally:
        monitor.stop()
