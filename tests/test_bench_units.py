"""The benchmark package's own logic: targets, statistics, the table, and the overhead
machinery run on CPU torch with simulated GPUs (the GPU machine runs it for real)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import stats  # noqa: E402
from benchmarks.report import Outcome, Target, outcome_json, table  # noqa: E402


def test_target_met_follows_its_operator_and_nan_is_not_evaluable() -> None:
    assert Target("a", 0.4, "%", "<=", 0.5).met is True
    assert Target("a", 0.6, "%", "<=", 0.5).met is False
    assert Target("a", 10.0, "ms", "<", 10.0).met is False
    assert Target("a", math.nan, "", "<=", 1.0).met is None
    assert Target("a", 1.0, "ms", "<=", 2.0).target == "<= 2 ms"
    with pytest.raises(ValueError, match="op must be one of"):
        Target("a", 1.0, "", "==", 1.0)


def test_statistics() -> None:
    assert stats.median([3.0, 1.0, math.nan, 2.0]) == 2.0
    assert math.isnan(stats.median([]))
    assert stats.slowdown_pct(100.0, 99.0) == pytest.approx(1.0)
    assert stats.slowdown_pct(100.0, 101.0) == pytest.approx(-1.0)
    assert stats.median_spacing_s([0.0, 0.02, 0.04, 0.1]) == pytest.approx(0.02)
    assert stats.robust_sigma_pct([100.0, 100.0, 100.0]) == 0.0
    assert stats.robust_sigma_pct([99.0, 100.0, 101.0]) == pytest.approx(1.4826, rel=1e-3)


def test_json_record_and_table_show_a_missed_target() -> None:
    out = Outcome(raw={"x": [1.0, math.nan]})
    out.targets.append(Target("spacing", 30.0, "ms", "<=", 25.0))
    out.figure("points", 12.0, "")
    rec = outcome_json("ok", 1.23456, out)
    assert rec["raw"]["x"] == [1.0, None]
    assert rec["targets"][0]["met"] is False and rec["targets"][0]["target"] == "<= 25 ms"
    text = table({"res": rec, "gone": outcome_json("skipped", 0.0, None, "no GPU here")})
    lines = text.splitlines()
    assert any("spacing" in ln and ln.rstrip().endswith("NO") for ln in lines)
    assert any("gone" in ln and "skipped" in ln and "no GPU here" in ln for ln in lines)


def test_median_interval_uses_binomial_order_statistics() -> None:
    # n = 30: the 95 % interval of the median is the 10th to the 21st value (1-indexed)
    assert stats.median_interval(range(30)) == (9.0, 20.0)
    assert stats.median_interval(range(100)) == (39.0, 60.0)
    assert all(math.isnan(v) for v in stats.median_interval([1.0, 2.0, 3.0]))


def test_overhead_machinery_on_cpu_with_simulated_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from benchmarks.gpu_loops import ComputeBound, LaunchBound
    from benchmarks.gpu_overhead import measure_loop, monitors_for

    monkeypatch.setattr("benchmarks.gpu_overhead.WARMUP_S", 0.02)

    import nbgpu

    monitors = monitors_for([0], nvml=nbgpu.SimulatedGPUs(count=1), source=nbgpu.SimulatedGPUs(count=1))
    names = [m.name for m in monitors]
    assert names == ["control", "nbgpu", "nbgpu_panel", "naive_50hz", "nvitop"]
    for loop in (LaunchBound(["cpu"]), ComputeBound(["cpu"], size=64)):
        res = measure_loop(loop, monitors, quartets=2, block_s=0.02, min_periods=0.0)
        ran = [m.name for m in monitors if m.available]
        assert set(res["arms"]) == set(ran)
        for arm in res["arms"].values():
            assert len(arm["quartet_slowdown_pct"]) == 2
            assert len(arm["on_steps_per_s"]) == 4 and len(arm["off_steps_per_s"]) == 4
            assert all(r > 0 for r in arm["on_steps_per_s"] + arm["off_steps_per_s"])
        facts = res["arms"]["nbgpu"]["monitor_facts"]
        assert all(f["ticks"] >= 1 for f in facts)
        assert all(f["readings"] >= 1 for f in res["arms"]["naive_50hz"]["monitor_facts"])
        if "nbgpu_panel" in res["arms"]:
            assert all(f["panel_errors"] == 0 for f in res["arms"]["nbgpu_panel"]["monitor_facts"])


def test_thread_cpu_probe_sees_a_busy_thread_and_not_an_idle_one() -> None:
    import threading
    import time

    from benchmarks.gpu_overhead import other_threads_cpu_s

    stop, done = threading.Event(), threading.Event()
    own: list[float] = []

    def spin() -> None:  # burns 0.2 s of its own CPU, however loaded the machine is
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.2:
            sum(range(1000))
        own.append(time.thread_time() - t0)
        done.set()
        stop.wait()

    idle = threading.Thread(target=stop.wait, daemon=True)
    idle.start()
    c0 = other_threads_cpu_s()
    time.sleep(0.2)
    assert other_threads_cpu_s() - c0 < 0.05
    busy = threading.Thread(target=spin, daemon=True)
    c1 = other_threads_cpu_s()
    busy.start()
    assert done.wait(60)
    used = other_threads_cpu_s() - c1
    stop.set()
    busy.join()
    idle.join()
    assert used == pytest.approx(own[0], abs=0.03)  # the probe reads the thread's own clock


def test_the_loop_thread_runs_alone_on_its_cpu_and_the_others_on_the_other() -> None:
    import os
    import threading

    from benchmarks import gpu_overhead as go

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait, daemon=True)
    before, cpus = go._pin_two_cpus()
    try:
        worker.start()
        go._place_threads()
        assert os.sched_getaffinity(threading.get_native_id()) == {cpus[0]}
        assert os.sched_getaffinity(worker.native_id) == {cpus[1]}
    finally:
        stop.set()
        go._placement.clear()
        os.sched_setaffinity(0, before)
        worker.join(5)


def test_section_timers_count_each_wrapped_function_and_put_it_back() -> None:
    from benchmarks.threadcpu import SectionTimers

    class Worker:
        def busy(self, n: int) -> int:
            return sum(range(n))

    table = {"rule": lambda x: x + 1}
    timers = SectionTimers()
    timers.wrap(Worker, "busy", "busy")
    timers.wrap(table, "rule", "rule")
    w = Worker()
    assert [w.busy(200_000) for _ in range(3)] == [sum(range(200_000))] * 3
    assert table["rule"](1) == 2
    assert timers.calls == {"busy": 3, "rule": 1}
    assert timers.cpu_ns["busy"] > 0
    timers.reset()
    assert not timers.calls and not timers.cpu_ns
    timers.undo()
    w.busy(10)
    table["rule"](1)
    assert not timers.calls  # the originals are back: nothing counts
    timers.wrap(Worker, "busy", lambda worker, n: f"busy {n}")  # a label from each call's arguments
    for n in (5, 5, 7):
        w.busy(n)
    timers.undo()
    assert timers.calls == {"busy 5": 2, "busy 7": 1}


def test_whole_cost_reads_each_threads_cpu_and_the_gil_holder_holds_what_it_says() -> None:
    import os
    import threading
    import time

    from benchmarks.interference_controls import GilHolder, expected_pct
    from benchmarks.kernel_cost import thread_cpu_ns

    spun, done = threading.Event(), threading.Event()

    def spin() -> None:
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass
        spun.set()
        done.wait()

    t = threading.Thread(target=spin)
    before = thread_cpu_ns(os.getpid())
    t.start()
    assert spun.wait(60)
    after = thread_cpu_ns(os.getpid())
    done.set()
    t.join()
    assert after[t.native_id] - before.get(t.native_id, 0) >= 190e6  # it spun 0.2 s of CPU
    holder = GilHolder(10.0)  # four bursts of 2.5 ms a second
    holder.start()
    time.sleep(1.1)
    facts = holder.stop()
    assert holder.burst_s == 0.0025 and facts["wakes"] >= 1
    assert facts["held_s"] >= 0.99 * facts["wakes"] * holder.burst_s  # each burst spins its length
    assert math.isclose(expected_pct(10.0), 10 / 990 * 100)
