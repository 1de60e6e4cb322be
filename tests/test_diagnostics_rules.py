"""Each diagnostics rule: a scenario that must raise it and a near miss that must not."""

from __future__ import annotations

import numpy as np
import pytest

from conftest_diagnostics import ShapedGPUs, drive, findings_per_evaluation, fired, sim_sampler
from nbgpu.sources.simulated import SCENARIOS

TOTAL = 143771 * 2**20  # the simulated card's memory, bytes

# scenario -> (rule, GPUs expected, severity reached, seconds it may take at most)
EXPECTED = {
    "input_bound": ("input_bound", {0, 1}, "warning", 30),
    "leak": ("memory_leak", {0, 1}, "warning", 30),
    "oom": ("oom_risk", {0, 1}, "critical", 30),
    "imbalance": ("imbalance", {3}, "warning", 30),
    "throttle": ("throttling", {0, 1}, "warning", 30),
    "thin": ("busy_thin", {0, 1}, "info", 30),
    "idle": ("idle", {0, 1}, "info", 30),
}


def run(scenario: str, seconds: float = 30, cell: bool = False, **kw):
    s, clock = sim_sampler(scenario, count=4 if scenario == "imbalance" else 2, **kw)
    if cell:
        s.diagnostics.cell_running(True)
    drive(s, clock, seconds)
    return s


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_scenario_raises_its_diagnosis_within_30_s(scenario):
    rule, gpus, severity, within_s = EXPECTED[scenario]
    s = run(scenario, within_s, cell=scenario == "idle")
    alerts = fired(s)
    assert {a.rule for a in alerts} == {rule}, [str(a) for a in alerts]
    assert {a.gpu for a in alerts} == gpus
    assert {a.severity for a in alerts} == {severity}
    for a in alerts:
        assert a.end is None and a.message and a.suggestion and a.evidence
        assert f"GPU {a.gpu}" in a.message


def test_steady_raises_nothing_even_in_a_cell():
    s = run("steady", 120, cell=True)
    assert fired(s) == []
    assert s.diagnostics.evaluations >= 120 / s.diagnostics.thresholds.eval_every_s - 2


def test_all_scenarios_are_covered():
    assert set(EXPECTED) | {"steady"} == set(SCENARIOS)


# -- OOM risk -------------------------------------------------------------------------------
def test_oom_brief_spike_above_95_percent_does_not_raise():
    spike = ShapedGPUs(count=1, mem=lambda g, t, m: 0.97 * TOTAL if 20 <= t < 21.5 else m)
    s, clock = sim_sampler(source=spike)
    drive(s, clock, 60)
    assert fired(s, "oom_risk") == []


def test_an_allocator_peak_between_nvmls_samples_is_an_oom_warning(monkeypatch):
    """A PyTorch peak reached since the last look counts, though NVML never saw it; one from
    before the first look does not."""
    import sys
    import types

    cuda = types.SimpleNamespace(is_initialized=lambda: True, device_count=lambda: 1,
                                 memory_reserved=lambda i: 2 * 2**30, max_memory_reserved=lambda i: peak[0],
                                 get_device_properties=lambda i: types.SimpleNamespace(uuid=""))
    peak = [0.99 * TOTAL]  # from before the first look
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    s, clock = sim_sampler(count=1)
    drive(s, clock, 10)
    assert fired(s, "oom_risk") == []
    peak[0] = TOTAL  # allocated and freed between two of NVML's reads
    drive(s, clock, 3)
    (alert,) = fired(s, "oom_risk")
    assert alert.severity == "warning" and "by PyTorch's allocator" in alert.message
    assert alert.evidence["mem_peak_source"] == "allocator" and alert.evidence["held_s"] == 0.0


def test_oom_at_92_percent_is_a_warning_never_critical_and_one_alert():
    shaped = ShapedGPUs(count=1, mem=lambda g, t, m: (0.97 if 30 <= t < 35 else 0.92) * TOTAL)
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 60)
    alerts = fired(s, "oom_risk")
    assert len(alerts) == 1
    assert alerts[0].severity == "warning" and alerts[0].gpu == 0
    assert "92 %" in alerts[0].message or "97 %" in alerts[0].message


def test_oom_alert_ends_after_memory_is_freed_and_a_new_episode_is_a_new_alert():
    def mem(g, t, m):
        return 0.97 * TOTAL if (5 <= t < 25 or 60 <= t < 80) else 0.3 * TOTAL
    s, clock = sim_sampler(source=ShapedGPUs(count=1, mem=mem))
    drive(s, clock, 100)
    alerts = fired(s, "oom_risk")
    assert len(alerts) == 2
    first, second = alerts
    assert first.severity == second.severity == "critical"
    assert first.end is not None and 24 <= first.end - s.started_at <= 26
    assert second.start - s.started_at >= 60


# -- memory leak ----------------------------------------------------------------------------
def test_leak_message_gives_the_rate_per_minute():
    s = run("leak", 40)
    a = fired(s, "memory_leak")[0]
    # the scenario leaks 31 MB/s = 1.86 GB per minute
    assert 1.5e9 <= a.evidence["rate_bytes_per_min"] <= 2.3e9
    assert "per minute" in a.message


def test_one_off_allocation_freed_again_is_not_a_leak():
    shaped = ShapedGPUs(count=1, mem=lambda g, t, m: m + (3e9 if 20 <= t < 32 else 0))
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 90)
    assert fired(s, "memory_leak") == []


def test_warm_up_allocations_in_quick_steps_then_flat_are_not_a_leak():
    shaped = ShapedGPUs(count=1, mem=lambda g, t, m: 2e9 + 1e9 * min(int(max(t - 20, 0) / 2), 4))
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 120)
    assert fired(s, "memory_leak") == []


def _epochs(s, clock, growth_per_epoch, epochs=6, epoch_s=4.0):
    """Drive ``epochs`` epochs of ``epoch_s`` with a mark at each start."""
    for i in range(epochs):
        s.mark(f"epoch {i}")
        drive(s, clock, epoch_s)
    s.mark(f"epoch {epochs}")
    drive(s, clock, 2)


def test_memory_rising_at_every_epoch_mark_is_a_leak_with_the_rate_per_epoch():
    epoch_s = 4.0
    shaped = ShapedGPUs(count=1, mem=lambda g, t, m: 20e9 + 310e6 * int(t / epoch_s) + 5e6 * (t % 1))
    s, clock = sim_sampler(source=shaped, thresholds={"leak_windows_s": (600.0,)})
    _epochs(s, clock, 310e6, epoch_s=epoch_s)
    alerts = fired(s, "memory_leak")
    assert len(alerts) == 1
    a = alerts[0]
    assert a.evidence["method"] == "marks"
    assert a.evidence["per_mark_bytes"] == pytest.approx(310e6, rel=0.05)
    assert "+295.6 MiB per epoch" in a.message  # 310e6 bytes in binary units


def test_memory_that_rises_for_two_epochs_then_stays_is_not_a_leak():
    epoch_s = 4.0
    shaped = ShapedGPUs(count=1, mem=lambda g, t, m: 20e9 + 2e9 * min(int(t / epoch_s), 2))
    s, clock = sim_sampler(source=shaped)
    _epochs(s, clock, 0, epochs=8, epoch_s=epoch_s)
    assert fired(s, "memory_leak") == []


# -- input-bound ----------------------------------------------------------------------------
def test_brief_util_dip_while_cpu_busy_is_not_input_bound():
    busy = {"proc_cpu_pct": 350.0, "host_cpu_pct": 80.0}
    shaped = ShapedGPUs(count=1, util=lambda g, t, u: 5.0 if 20 <= t < 23 else u,
                        host=lambda t, base: busy)
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 60)
    assert fired(s, "input_bound") == []


def test_low_util_with_an_idle_cpu_is_not_input_bound():
    shaped = ShapedGPUs(count=1, scenario="input_bound",
                        host=lambda t, base: {"proc_cpu_pct": 10.0, "host_cpu_pct": 5.0})
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 60)
    assert fired(s, "input_bound") == []


@pytest.mark.parametrize("scenario, rule, gpus", [("input_bound", "input_bound", 2),
                                                  ("imbalance", "imbalance", 1),
                                                  ("thin", "busy_thin", 2)])
def test_every_evaluation_judges_utilisation_though_nobody_watches(monkeypatch, scenario, rule, gpus):
    # Nobody watches, so utilisation reaches the store up to 10 s after it was sampled. The
    # rules judge it up to where it is complete, not as missing half the time.
    counts = findings_per_evaluation(monkeypatch, rule)
    run(scenario, 60)
    steady = counts[len(counts) // 2:]
    assert len(steady) >= 12 and set(steady) == {gpus}, counts


def test_utilisation_and_cpu_are_judged_over_the_same_seconds():
    # A light phase (GPU 30 %, CPU idle) turns into training (GPU 95 %, CPU busy). Any
    # window both share is never "GPU starved while the CPU works"; utilisation from before
    # the change beside the CPU after it would be.
    def util(_g, t, _u):
        return 30.0 if t < 40 else 95.0

    def host(t, _base):
        cpu = 10.0 if t < 40 else 230.0
        return {"proc_cpu_pct": cpu, "host_cpu_pct": cpu / 4}

    for start in np.arange(0.0, 10.0, 0.5):  # every phase of the drains against the change
        s, clock = sim_sampler(source=ShapedGPUs(count=1, util=util, host=host))
        drive(s, clock, start)
        s.diagnostics._last_eval = -np.inf
        drive(s, clock, 70 - start)
        assert fired(s, "input_bound") == [], start


@pytest.mark.parametrize("scenario", ["input_bound", "imbalance", "thin", "idle"])
def test_utilisation_rules_fire_unwatched_however_strict_the_staleness(monkeypatch, scenario):
    # Staleness counts from where utilisation is complete, not from now: readings 2 s old at
    # most are asked for, and utilisation arrives every 10 s, yet every evaluation judges it.
    rule, gpus, _severity, _within_s = EXPECTED[scenario]
    counts = findings_per_evaluation(monkeypatch, rule)
    s = run(scenario, 60, cell=scenario == "idle", thresholds={"stale_after_s": 2.0})
    assert {a.rule for a in fired(s)} == {rule}
    assert {a.gpu for a in fired(s)} == gpus
    steady = counts[len(counts) // 2:]
    assert len(steady) >= 12 and set(steady) == {len(gpus)}, counts


# -- idle -------------------------------------------------------------------------------------
def test_idle_needs_a_running_cell_by_default():
    assert fired(run("idle", 60, cell=False)) == []


def test_idle_is_not_raised_for_a_short_cell():
    s, clock = sim_sampler("idle")
    drive(s, clock, 20)
    s.diagnostics.cell_running(True)
    drive(s, clock, 6)
    s.diagnostics.cell_running(False)
    drive(s, clock, 20)
    assert fired(s) == []


def test_idle_without_the_cell_condition_when_configured():
    s = run("idle", 30, thresholds={"idle_only_in_cell": False})
    assert {a.rule for a in fired(s)} == {"idle"}


# -- imbalance --------------------------------------------------------------------------------
def test_one_gpu_dipping_briefly_is_not_imbalance():
    shaped = ShapedGPUs(count=4, util=lambda g, t, u: 0.0 if g == 2 and 20 <= t < 24 else u)
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 60)
    assert fired(s, "imbalance") == []


def test_imbalance_message_names_the_idle_gpu_and_the_busy_ones():
    a = fired(run("imbalance", 30), "imbalance")[0]
    assert a.message.startswith("GPU 3 idle")
    assert "0–2 are busy" in a.message
    assert a.evidence["busy_gpus"] == [0, 1, 2]


def test_gpus_this_kernel_does_not_use_are_not_compared():
    # GPU 3 holds memory of another process only: not this kernel's, so not imbalance
    shaped = ShapedGPUs(count=4, scenario="imbalance", mem=lambda g, t, m: 0.5e9 if g == 3 else m)
    shaped.add_process(3, pid=1, used_bytes=int(5e9))
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 33)
    assert [p.pid for p in s.processes()[3]] == [1]
    assert fired(s, "imbalance") == []


# -- throttling -------------------------------------------------------------------------------
def test_power_at_the_limit_for_two_seconds_is_not_throttling():
    shaped = ShapedGPUs(count=1, power=lambda g, t, p: 700.0 if 20 <= t < 22 else p,
                        reasons=lambda g, t, b: 0x4 if 20 <= t < 22 else b)
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 60)
    assert fired(s, "throttling") == []


def test_power_cap_alone_is_an_info_throttle():
    shaped = ShapedGPUs(count=1, power=lambda g, t, p: 699.0, reasons=lambda g, t, b: 0x4)
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 30)
    (a,) = fired(s, "throttling")
    assert a.severity == "info" and "sw_power_cap" in a.message and "power" in a.message


# -- busy but thin ------------------------------------------------------------------------------
def test_thin_needs_gpm_readings():
    s, clock = sim_sampler(source=ShapedGPUs(count=1, scenario="thin", gpm=False))
    drive(s, clock, 40)
    assert fired(s) == []


def test_thin_is_not_raised_when_util_is_low():
    shaped = ShapedGPUs(count=1, scenario="thin", util=lambda g, t, u: u * 0.4)
    s, clock = sim_sampler(source=shaped)
    drive(s, clock, 40)
    assert fired(s, "busy_thin") == []


# -- thresholds ---------------------------------------------------------------------------------
def test_a_disabled_rule_never_fires():
    s = run("oom", 40, thresholds={"disabled": ("oom_risk",)})
    assert fired(s, "oom_risk") == []


def test_thresholds_change_what_fires():
    s = run("input_bound", 40, thresholds={"input_util_below_pct": 20.0})
    assert fired(s, "input_bound") == []


def test_a_model_loading_across_the_first_marks_is_not_a_leak():
    # the steady scenario loads 72 GB over 6 s; epochs of 2.5 s mark the ramp three times
    s, clock = sim_sampler("steady", count=1)
    for i in range(8):
        s.mark(f"epoch {i}")
        drive(s, clock, 2.5)
    assert fired(s, "memory_leak") == []
