"""The engine in the sampler: episodes, callbacks, thresholds, the Sampler API, cost."""

from __future__ import annotations

import threading

import pytest

import nbgpu
from conftest_diagnostics import FakeClock, ShapedGPUs, drive, findings_per_evaluation, fired, sim_sampler
from nbgpu.diagnostics import RULES, Thresholds
from nbgpu.sources.simulated import SimulatedGPUs

TOTAL = 143771 * 2**20


def test_a_long_leak_is_one_alert_per_gpu_that_stays_open():
    s, clock = sim_sampler("leak")
    drive(s, clock, 150)
    alerts = fired(s)
    assert sorted(a.gpu for a in alerts) == [0, 1]
    assert all(a.rule == "memory_leak" and a.end is None for a in alerts)


def test_condition_flickering_shorter_than_clear_after_keeps_one_alert():
    # memory above 95 % with 4 s dips to 50 % every 20 s: one critical episode, no flapping
    shaped = ShapedGPUs(count=1, mem=lambda g, t, m: (0.5 if t % 20 >= 16 else 0.97) * TOTAL)
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 120)
    alerts = fired(s, "oom_risk")
    assert len(alerts) == 1 and alerts[0].end is None


def test_escalation_updates_the_same_alert_and_calls_back_twice():
    seen = []
    s, clock = sim_sampler("oom", count=1)
    s.on_alert(lambda a: seen.append((a.rule, a.severity)))
    drive(s, clock, 30)
    (a,) = fired(s)
    assert a.severity == "critical"
    assert seen == [("oom_risk", "warning"), ("oom_risk", "critical")]


def test_a_failing_callback_is_counted_and_the_others_still_run():
    got = []

    def broken(alert):
        raise RuntimeError("boom")

    s, clock = sim_sampler("throttle", count=1)
    s.on_alert(broken)
    s.on_alert(got.append)
    drive(s, clock, 20)
    assert [a.rule for a in got] == ["throttling"]
    assert s.diagnostics.callback_errors == 1
    assert "boom" in s.diagnostics.last_callback_error
    assert s.errors == 0


def test_on_alert_rejects_what_is_not_callable():
    s, _ = sim_sampler()
    with pytest.raises(ValueError, match="on_alert needs a function"):
        s.on_alert("print")


def test_alerts_dataframe_has_the_documented_columns():
    s, clock = sim_sampler("input_bound")
    drive(s, clock, 20)
    df = s.alerts
    for col in ("rule", "severity", "gpu", "start", "end", "duration_s", "active", "message",
                "suggestion", "evidence"):
        assert col in df.columns
    assert str(df["start"].dt.tz) == "UTC"
    assert df["active"].all() and df["end"].isna().all()
    assert list(df["gpu"]) == [0, 1]


def test_rules_run_once_per_eval_period_however_fast_the_ticks():
    s, clock = sim_sampler("steady")
    drive(s, clock, 10, step=0.1)
    period = s.diagnostics.thresholds.eval_every_s
    assert 10 / period - 1 <= s.diagnostics.evaluations <= 10 / period + 1


def test_diagnostics_can_be_switched_off():
    s, clock = sim_sampler("oom", diagnostics=False)
    drive(s, clock, 30)
    assert s.diagnostics is None and s.alert_list() == [] and len(s.alerts) == 0
    with pytest.raises(ValueError, match="diagnostics=False"):
        s.on_alert(print)


def test_thresholds_reject_unknown_names_and_bad_values():
    with pytest.raises(ValueError, match=r"unknown threshold.*oom_warn"):
        Thresholds.from_any({"oom_warn": 0.5})
    with pytest.raises(ValueError, match="oom_warning_fraction must be a number"):
        Thresholds(oom_warning_fraction=-1)
    with pytest.raises(ValueError, match="unknown rule"):
        Thresholds(disabled=("oom",))
    sim = nbgpu.SimulatedGPUs()
    with pytest.raises(ValueError):
        nbgpu.Sampler(sim, thresholds={"nope": 1})
    assert not sim.initialised  # bad thresholds release NVML again


def test_thresholds_from_a_json_file_and_its_faults_in_one_line(tmp_path):
    good = tmp_path / "thresholds.json"
    good.write_text('{"idle_window_s": 30, "disabled": ["busy_thin"]}')
    t = Thresholds.from_any(str(good))
    assert t.idle_window_s == 30 and t.disabled == ("busy_thin",)
    assert Thresholds.from_any(good) == t
    bad_json, not_dict, unknown = (tmp_path / n for n in ("bad.json", "list.json", "unknown.json"))
    bad_json.write_text("{idle_window_s: 30")
    not_dict.write_text("[1, 2]")
    unknown.write_text('{"nope": 1}')
    for path, said in ((tmp_path / "missing.json", "No such file"), (bad_json, "not JSON"),
                       (not_dict, "a JSON object"), (unknown, "unknown threshold")):
        with pytest.raises(nbgpu.NbgpuError) as err:
            Thresholds.from_any(path)
        assert said in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_every_threshold_is_documented_in_code_and_in_the_readme_section():
    from pathlib import Path

    doc = (Path(__file__).parents[1] / "docs" / "diagnostics.md").read_text()
    for row in Thresholds.table():
        assert len(row["help"]) > 15
        assert f"`{row['name']}`" in doc, row["name"]
    for rule in RULES:
        assert f"`{rule}`" in doc


def test_work_a_higher_layer_reports_counts_as_a_running_cell_for_idle():
    from nbgpu.diagnostics import register_activity

    s, clock = sim_sampler("idle")
    remove = register_activity(lambda sampler: sampler is s)
    try:
        drive(s, clock, 20)  # the 10 s window, judged up to the last 5 s drain of utilisation
        assert {a.rule for a in fired(s)} == {"idle"}
    finally:
        remove()
    drive(s, clock, 30)
    assert all(a.end is not None for a in fired(s))


def test_an_open_capture_is_reported_as_work_on_its_sampler():
    from nbgpu.profiles.capture import Capture

    s, clock = sim_sampler("idle")
    with Capture(sampler=s):
        drive(s, clock, 20)
        assert {a.rule for a in fired(s)} == {"idle"}


def test_live_sampler_raises_calls_back_from_its_thread_and_ends_alerts_on_stop():
    """The sampler's own thread raises, escalates and calls back; stopping it ends the alert.

    Its fake clock is moved one interval after each step by a listener of that thread, until
    the critical call: fake time passes step by step however the thread is scheduled, then
    stands still, so the test waits on that call, not on elapsed time. Binary fractions of a
    second keep the times exact.
    """
    clock = FakeClock()
    shaped = ShapedGPUs(count=1, mem=lambda g, t, m: 0.97 * TOTAL, clock=clock)
    calls = []
    critical = threading.Event()
    th = {"oom_warning_after_s": 0.25, "oom_critical_after_s": 0.5, "eval_every_s": 0.125}

    def on_alert(alert) -> None:
        calls.append((alert.severity, threading.current_thread().name, clock.t - s.started_at))
        if alert.severity == "critical":
            critical.set()

    def one_interval_on(sampler: nbgpu.Sampler, now: float) -> None:
        if not critical.is_set():
            clock.t = now + sampler.interval

    s = nbgpu.Sampler(shaped, interval=0.0625, thresholds=th, clock=clock)
    s.on_alert(on_alert)
    s.add_listener(one_interval_on)
    clock.t += 2**-10  # the probe took a GPM sample at the clock's time: GPM needs another
    with s:
        assert critical.wait(10), f"no critical alert; calls so far: {calls}"
        assert s.running
        active = s.alert_list()
    assert [a.severity for a in active] == ["critical"] and active[0].end is None
    assert calls == [("warning", "nbgpu-sampler", 0.25), ("critical", "nbgpu-sampler", 0.5)]
    (ended,) = s.alert_list()
    assert ended.end == s.started_at + 0.5


def test_alert_list_since_gives_the_alerts_on_then_or_later_and_copies_only_those():
    from nbgpu.diagnostics.alerts import Alert, Episodes

    ep = Episodes(clear_after_s=5.0)
    old = Alert("idle", "info", 0, 10.0, 20.0, "m", "s", {"k": 1})
    late = Alert("idle", "info", 0, 30.0, 40.0, "m", "s", {})
    on = Alert("input_bound", "warning", 1, 35.0, None, "m", "s", {})
    ep.alerts.extend([old, late, on])
    ep._open[("input_bound", 1)] = on
    assert [a.start for a in ep.snapshot()] == [10.0, 30.0, 35.0]
    assert [a.start for a in ep.snapshot(since_s=25.0)] == [30.0, 35.0]
    assert [a.start for a in ep.snapshot(since_s=40.0)] == [30.0, 35.0]  # ended at 40: on then
    assert [a.start for a in ep.snapshot(since_s=float("inf"))] == [35.0]
    got = ep.snapshot(since_s=0.0)[0]
    got.evidence["k"] = 2
    assert got is not old and old.evidence == {"k": 1}


def _counted(monkeypatch, rule: str) -> list[float]:
    """The times ``rule`` is run at."""
    from nbgpu.diagnostics import engine

    runs: list[float] = []
    original = engine.RULE_FUNCTIONS[rule]

    def counted(ctx):
        runs.append(ctx.now)
        return original(ctx)

    monkeypatch.setitem(engine.RULE_FUNCTIONS, rule, counted)
    return runs


@pytest.mark.parametrize("rule", ["input_bound", "busy_thin"])
def test_rules_judging_utilisation_run_again_only_once_it_moved(monkeypatch, rule):
    # Nobody watches: utilisation is drained every 10 s and the rules judge it (and the CPU
    # or SM activity beside it) up to there, so between drains they would find the same.
    runs = _counted(monkeypatch, rule)
    found = findings_per_evaluation(monkeypatch, rule)
    s, clock = sim_sampler("input_bound" if rule == "input_bound" else "thin")
    drive(s, clock, 60)
    evaluations = s.diagnostics.evaluations
    assert evaluations >= 29 and len(runs) <= evaluations / 3
    assert set(found[len(found) // 2:]) == {2}  # every evaluation still reports both GPUs


def test_rules_judging_utilisation_run_every_evaluation_where_it_is_polled(monkeypatch):
    runs = _counted(monkeypatch, "input_bound")
    sim = SimulatedGPUs(count=2, scenario="input_bound", sample_buffers=False)
    s, clock = sim_sampler(source=sim)
    drive(s, clock, 30)
    assert len(runs) == s.diagnostics.evaluations


def test_a_rule_runs_again_when_a_cell_starts_or_a_gpu_is_lost(monkeypatch):
    runs = _counted(monkeypatch, "input_bound")
    sim = SimulatedGPUs(count=2, scenario="input_bound")
    s, clock = sim_sampler(source=sim)
    drive(s, clock, 21)
    before = len(runs)
    s.diagnostics.evaluate(s, clock.t)  # the same inputs: the findings are kept
    assert len(runs) == before
    s.diagnostics.cell_running(True)  # a cell starts: the idle rule judges it
    s.diagnostics.evaluate(s, clock.t)
    assert len(runs) == before + 1
    sim.lose_gpu(1)
    drive(s, clock, 0.5)
    assert 1 in s.lost
    s.diagnostics.evaluate(s, clock.t)
    assert len(runs) == before + 2
    assert {a.gpu for a in s.diagnostics.alert_list()} == {0, 1}


def test_an_evaluation_reads_only_the_events_added_since_the_last_one(monkeypatch):
    # nbgpu.track() marks every iteration and the store keeps 10,000 events: reading them all
    # at every evaluation (every 2 s, in the sampler's thread) cost 8 times the rest of it.
    s, clock = sim_sampler("steady", count=1)
    drive(s, clock, 4)
    for i in range(2000):
        s.mark(f"step {i}", clock.t - 3.0 + i * 1e-3)
    read: list[int] = []
    since = s.store.events_since
    monkeypatch.setattr(s.store, "events_since", lambda seq=0: read.append(len(r := since(seq))) or r)
    s.diagnostics.evaluate(s, clock.t)
    s.mark("later")
    s.diagnostics.evaluate(s, clock.t + 0.1)
    assert read == [2000, 1]


def test_the_rules_see_the_newest_marks_up_to_now_and_only_those_the_store_keeps():
    from collections import deque

    s, clock = sim_sampler("steady", count=1)
    s.store.events = deque(maxlen=50)  # a small store: its oldest events leave
    seen: list = []
    original = s.diagnostics.context

    def context(sampler, now):
        ctx = original(sampler, now)
        seen.append(list(ctx.marks))
        return ctx

    s.diagnostics.context = context
    for i in range(40):
        s.mark(f"epoch {i}", clock.t - 100 + i)
    s.mark("in the future", clock.t + 50)
    s.diagnostics.evaluate(s, clock.t)
    assert seen[-1] == [(clock.t - 100 + i, f"epoch {i}") for i in range(36, 40)]
    for i in range(50):  # every past mark leaves the store
        s.mark(f"later {i}", clock.t + 60 + i)
    s.diagnostics.evaluate(s, clock.t + 1)
    assert seen[-1] == []
