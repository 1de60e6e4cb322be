"""The rules that read where the main thread was: input-, launch- and sync-bound judged by
the stack samples' split, one bottleneck per cell, and a short cell judged on its own.

The samples are constructed (``StackSamples.add``) beside shaped simulated GPUs on a fake
clock, so each test says exactly what the main thread did and what the GPU showed.
"""

from __future__ import annotations

import math

import pytest

import nbgpu
from conftest_diagnostics import ShapedGPUs, drive, fired, sim_sampler
from conftest_profiles import clean_profiles_fixture  # noqa: F401 - fixture
from nbgpu.diagnostics import stacks

LOOP = (7, "for x, y in dl")
ITEM = (9, "total += loss.item()")
STEP = (8, "out = model(x)")


def feed(s, t0: float, t1: float, parts: list[tuple[str, float, tuple[int, str]]], hz: float = 40.0) -> None:
    """Stack samples at ``hz`` over [t0, t1): each part (category, share, (line, text)) in turn."""
    got = stacks.samples_of(s, create=True)
    got.period_s = math.inf  # nothing sampled for real: only what the test says
    n = round((t1 - t0) * hz)
    pattern = [(c, line) for c, share, line in parts for _ in range(round(share * 20))]
    for i in range(n):
        category, (number, text) = pattern[i % len(pattern)]
        got.add(t0 + i / hz, category, ("<cell>", number), text)


def shaped(util: float, cpu: float, scenario: str = "steady", **kw):
    src = ShapedGPUs(count=1, scenario=scenario, util=lambda g, t, d: util,
                     host=lambda t, b: {"proc_cpu_pct": cpu, "host_cpu_pct": 50.0}, **kw)
    return sim_sampler(source=src)


def rules(s) -> set[str]:
    return {a.rule for a in fired(s)}


def test_a_launch_bound_loop_is_not_called_input_bound():
    """Issue 28, defect 4: tiny kernels issued from Python, no data loader, GPU 30 % busy."""
    s, clock = shaped(util=30.0, cpu=100.0)
    feed(s, clock.t, clock.t + 30, [("gpu_issue", 0.85, STEP), ("cpu", 0.15, STEP)])
    drive(s, clock, 30.0)
    assert "input_bound" not in rules(s)
    (alert,) = fired(s, "launch_bound")
    assert "issuing GPU work from Python at line 8 `out = model(x)`" in alert.message
    assert "launch-bound" in alert.message and "CUDA graphs" in alert.suggestion
    assert "torch.compile" in alert.suggestion and ".item()" in alert.suggestion


def test_a_launch_bound_loop_on_a_busy_but_thin_gpu():
    s, clock = sim_sampler("thin", count=1)
    feed(s, clock.t, clock.t + 30, [("gpu_issue", 0.9, STEP), ("cpu", 0.1, STEP)])
    drive(s, clock, 30.0)
    (alert,) = fired(s, "launch_bound")
    assert "looks busy" in alert.message and "SMs are mostly unused" in alert.message


def test_input_bound_fires_only_when_the_data_loader_holds_the_time():
    s, clock = shaped(util=25.0, cpu=380.0)
    feed(s, clock.t, clock.t + 30, [("data_loader", 0.8, LOOP), ("gpu_issue", 0.2, STEP)])
    drive(s, clock, 30.0)
    (alert,) = fired(s, "input_bound")
    assert "80 % of it getting data in (data loader 80 %) at line 7 `for x, y in dl`" in alert.message
    assert alert.evidence["line"] == 7 and alert.evidence["shares"]["data_loader"] == pytest.approx(0.8)
    assert rules(s) == {"input_bound"}


@pytest.mark.parametrize("category", ["cpu", "idle", "gpu_issue", "gpu_wait"])
def test_low_utilisation_and_a_busy_cpu_elsewhere_than_the_loader_is_not_input_bound(category):
    s, clock = shaped(util=25.0, cpu=380.0)
    feed(s, clock.t, clock.t + 30, [(category, 0.8, STEP), ("data_loader", 0.2, LOOP)])
    drive(s, clock, 30.0)
    assert "input_bound" not in rules(s)


def test_host_to_device_copies_count_as_input():
    # The H200 suite's h2d_pageable cell: blocking copies from pageable memory, no loader.
    s, clock = shaped(util=14.0, cpu=104.0)
    feed(s, clock.t, clock.t + 30, [("h2d_copy", 0.96, STEP), ("gpu_issue", 0.04, STEP)])
    drive(s, clock, 30.0)
    (alert,) = fired(s, "input_bound")
    assert "of it getting data in (copies to the GPU 9" in alert.message
    assert rules(s) == {"input_bound"}


def test_a_thread_that_only_waits_for_a_busy_gpu_is_not_sync_bound():
    # The suite's matmul loops: a sync every few matmuls, the main thread waits 94-100 % of
    # the time; a window reaching a second before the cell shows utilisation in the 80s.
    s, clock = shaped(util=85.0, cpu=100.0)
    feed(s, clock.t, clock.t + 30, [("gpu_wait", 0.96, ITEM), ("gpu_issue", 0.04, STEP)])
    drive(s, clock, 30.0)
    assert "sync_bound" not in rules(s)


def test_without_a_split_input_bound_says_it_is_a_possibility():
    s, clock = shaped(util=25.0, cpu=380.0)
    drive(s, clock, 30.0)
    (alert,) = fired(s, "input_bound")
    assert "may be waiting for input, or for Python launching small kernels" in alert.message
    assert "%%gpumon" in alert.suggestion
    assert "launch_bound" not in rules(s) and "sync_bound" not in rules(s)


def test_sync_bound_names_the_line_that_waits():
    s, clock = shaped(util=60.0, cpu=100.0)
    feed(s, clock.t, clock.t + 30, [("gpu_wait", 0.7, ITEM), ("gpu_issue", 0.3, STEP)])
    drive(s, clock, 30.0)
    (alert,) = fired(s, "sync_bound")
    assert "70 % of the time waiting for GPU 0 at line 9 `total += loss.item()`" in alert.message
    assert rules(s) == {"sync_bound"}


def test_waiting_for_a_gpu_kept_busy_is_not_sync_bound():
    """A healthy compute-bound loop: its .item() waits while the GPU runs flat out."""
    s, clock = shaped(util=97.0, cpu=100.0)
    feed(s, clock.t, clock.t + 30, [("gpu_wait", 0.7, ITEM), ("gpu_issue", 0.3, STEP)])
    drive(s, clock, 30.0)
    assert rules(s) == set()


def _cell(s, clock, seconds: float):
    """A finished capture of ``seconds`` of the stepped sampler's fake time."""
    cap = nbgpu.capture(sampler=s).start()
    drive(s, clock, seconds, step=0.25)
    cap.finish(wait=False)
    return cap


def test_no_two_findings_of_one_cell_contradict(clean_profiles):
    """A cell whose first half waits on the loader and second half issues small kernels."""
    s, clock = shaped(util=25.0, cpu=380.0)
    drive(s, clock, 5.0)
    t0 = clock.t
    feed(s, t0, t0 + 16, [("data_loader", 1.0, LOOP)])
    feed(s, t0 + 16, t0 + 40, [("gpu_issue", 1.0, STEP)])
    cap = _cell(s, clock, 40.0)
    assert {"input_bound", "launch_bound"} <= rules(s)  # each held a window of the cell
    bound = [a.rule for a in cap.alerts if a.rule in ("input_bound", "launch_bound", "sync_bound")]
    assert bound == ["launch_bound"]  # the one holding most of the cell: 24 s of 40


def test_a_cell_shorter_than_the_window_is_judged_on_its_own_readings(clean_profiles):
    s, clock = shaped(util=25.0, cpu=380.0)
    drive(s, clock, 20.0)  # before the cell: no stack samples
    feed(s, clock.t, clock.t + 4, [("data_loader", 0.9, LOOP), ("cpu", 0.1, STEP)])
    cap = _cell(s, clock, 4.0)
    (alert,) = [a for a in cap.alerts if a.rule == "input_bound"]
    assert "getting data in (data loader 90 %) at line 7" in alert.message and "over 4 s" in alert.message
    assert alert.message.endswith("(judged on the cell's 4.0 s)")
    assert alert.start >= cap.start_time and cap.too_short == []


def test_a_cell_too_short_to_judge_says_so(clean_profiles):
    from nbgpu.profiles.render import judged_line

    s, clock = shaped(util=25.0, cpu=380.0)
    drive(s, clock, 20.0)
    cap = _cell(s, clock, 0.5)
    assert [a.rule for a in cap.alerts if a.rule in ("input_bound", "idle")] == []
    assert {"input_bound", "launch_bound", "sync_bound", "idle", "throttling"} <= set(cap.too_short)
    line = judged_line(cap)
    assert line.startswith("too short to judge: ") and "input_bound" in line and "0.50 s" in line
    assert "too short to judge" in cap._repr_html_()


def test_a_cell_run_again_says_what_changed(clean_profiles):
    """Issue 28, defect 5: the fix (more loader workers) is recognised in the re-run's report."""
    from nbgpu.profiles import cells, history
    from nbgpu.profiles.marks import Tracker

    fixed_at = [math.inf]
    src = ShapedGPUs(count=1, util=lambda g, t, d: 7.0 if t < fixed_at[0] else 70.0,
                     host=lambda t, b: {"proc_cpu_pct": 380.0, "host_cpu_pct": 50.0})
    s, clock = sim_sampler(source=src)
    drive(s, clock, 5.0)
    s.start()  # two captures on one sampler: it runs (on the fake clock) through both

    def run(step_s: float, parts) -> history.CellRecord:
        feed(s, clock.t, clock.t + 24, parts)
        cap = nbgpu.capture(sampler=s).start()
        for _ in Tracker(range(round(24 / step_s))):  # on the running sampler, s
            drive(s, clock, step_s, step=0.25 if step_s >= 0.25 else step_s)
        cap.finish(wait=False)
        rec = history.CellRecord(None, "train-cell", "for x, y in dl: step(x)", cap)
        history.add(rec)
        return rec

    first = run(2.0, [("data_loader", 0.9, LOOP), ("gpu_issue", 0.1, STEP)])
    assert "input_bound" in {a.rule for a in first.capture.alerts}
    drive(s, clock, 5.0)
    fixed_at[0] = clock.t - s.started_at
    again = run(0.25, [("gpu_issue", 0.6, STEP), ("gpu_wait", 0.3, ITEM), ("data_loader", 0.1, LOOP)])
    text = cells.against_last(again)
    s.stop()
    head, *findings = text.split("\n")
    assert head.startswith("vs its last run (")
    assert "utilisation 7 % → 70 %" in head
    assert "steps a second 0.5 → 4 (8×)" in head
    assert ("main thread: data loader 90 % → 10 %, issuing GPU work 10 % → 60 %, "
            "waiting for the GPU 0 % → 30 %") in head
    assert "input_bound: gone" in findings
    assert not any(f.startswith("input_bound: still") for f in findings)
    assert nbgpu.history()["steps_per_s"].tolist() == [0.5, 4.0]
