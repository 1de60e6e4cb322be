"""Issue 31 (lean): behaviour that does not depend on import order; one error tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nbgpu import session
from nbgpu.errors import BadArgumentError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _no_shared_sampler():
    yield
    session.reset()


def _fresh(code: str) -> str:
    """Run ``code`` in a fresh interpreter (nothing of nbgpu imported first); its stdout."""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_sampler_has_diagnostics_whatever_was_imported_first():
    out = _fresh("from nbgpu.sampler import Sampler\n"
                 "s = Sampler('sim')\n"
                 "print(type(s.diagnostics).__name__)\n"
                 "s.stop()\n")
    assert out == "DiagnosticsEngine"


def test_sampler_without_diagnostics_says_so():
    from nbgpu.sampler import Sampler

    s = Sampler("sim", diagnostics=False)
    try:
        assert s.status().diagnostics is False
        assert "diagnostics=False" in str(s.alerts.attrs.get("note", ""))
    finally:
        s.stop()
    t = Sampler("sim")
    try:
        assert t.status().diagnostics is True
    finally:
        t.stop()


@pytest.mark.parametrize("interval", ["abc", True, -1, 0, float("nan")])
def test_ensure_sampler_refuses_a_bad_interval_with_one_line(interval):
    with pytest.raises(BadArgumentError) as info:
        session.ensure_sampler("sim", interval)
    assert "\n" not in str(info.value) and "interval" in str(info.value)
    assert session.shared_sampler() is None or session.shared_sampler().interval != interval


def test_views_resolve_their_defaults_without_nbgpu_init():
    out = _fresh("from nbgpu import hooks\n"
                 "hooks._VIEWS.clear()\n"
                 "print(*(hooks.default_view(k).__name__ for k in ('cell_report', 'oom_report')))\n")
    assert out.split() == ["CellReport", "OomReport"]
    assert "nbgpu.widgets" not in _fresh("import sys, nbgpu.hooks; print(sorted(sys.modules))")
    from nbgpu import hooks

    assert hooks.view("no-such-view", 5) == 5


def test_cost_settings_are_the_nbgpu_traits(monkeypatch):
    from nbgpu import config
    from nbgpu.profiles import cost

    for name in (cost.ENV_PRICE, cost.ENV_CURRENCY, cost.ENV_CARBON):
        monkeypatch.delenv(name, raising=False)
    cost.reset()
    try:
        cost.configure(price_per_kwh=0.4, currency="EUR")
        assert (config.settings().price_per_kwh, config.settings().currency) == (0.4, "EUR")
        config.settings().carbon_g_per_kwh = 300.0  # what %config NbGpu.carbon_g_per_kwh does
        assert cost.settings() == cost.CostSettings(0.4, "EUR", 300.0)
    finally:
        cost.reset()
    assert cost.settings() == cost.CostSettings()


def test_panel_window_default_is_the_setting():
    from nbgpu import config
    from nbgpu.sampler import Sampler
    from nbgpu.widgets.monitor import GPUMonitor

    s = Sampler("sim")
    cfg = config.settings()
    try:
        cfg.window_s = 120.0
        assert GPUMonitor(sampler=s, start=False, processes=False).window_s == 120.0
        assert GPUMonitor(sampler=s, start=False, processes=False, window_s=30).window_s == 30
    finally:
        cfg.window_s = 60.0
        s.stop()


def test_alerts_end_when_the_sampler_stops_not_when_someone_reads_them():
    # alert_list() is a read: the ongoing alert ends because the sampler's thread ended,
    # whether or not anyone asked the sampler for its alerts afterwards.
    import threading

    from nbgpu.sampler import Sampler
    from nbgpu.sources.simulated import SimulatedGPUs

    opened = threading.Event()
    s = Sampler(SimulatedGPUs(count=1, scenario="oom", seed=0), interval=0.05, host=False,
                thresholds={"oom_warning_after_s": 0.1, "eval_every_s": 0.05})
    s.on_alert(lambda alert: opened.set())
    with s:
        assert opened.wait(30), "no alert opened"
        assert any(a.end is None for a in s.alert_list())
    engine_view = s.diagnostics.alert_list()  # the engine's own list, not the sampler's façade
    assert engine_view and all(a.end is not None for a in engine_view)
    assert s.alert_list() == engine_view
