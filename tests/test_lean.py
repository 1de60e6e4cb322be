"""Issue 31 (lean): behaviour that does not depend on import order; one error tree."""

from __future__ import annotations

import math
import re
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

    for name in ("NBGPU_PRICE_PER_KWH", "NBGPU_CURRENCY", "NBGPU_CARBON_G_PER_KWH"):
        monkeypatch.delenv(name, raising=False)
    config.reset()
    try:
        cost.configure(price_per_kwh=0.4, currency="EUR")
        assert (config.settings().price_per_kwh, config.settings().currency) == (0.4, "EUR")
        config.settings().carbon_g_per_kwh = 300.0  # what %config NbGpu.carbon_g_per_kwh does
        c = cost.cost_of(3.6e6)
        assert (c.cost, c.currency, c.co2_g) == (pytest.approx(0.4), "EUR", pytest.approx(300.0))
    finally:
        config.reset()
    assert math.isnan(cost.cost_of(3.6e6).cost)


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

    from conftest_diagnostics import ShapedGPUs
    from nbgpu.sampler import Sampler

    opened = threading.Event()
    full = ShapedGPUs(count=1, mem=lambda gpu, t, used: 0.97 * 143771 * 2**20)  # 97 % of an H200
    s = Sampler(full, interval=0.05, host=False,
                thresholds={"oom_warning_after_s": 0.1, "eval_every_s": 0.05})
    s.on_alert(lambda alert: opened.set())
    with s:
        assert opened.wait(30), "no alert opened"
        assert any(a.end is None for a in s.alert_list())
    engine_view = s.diagnostics.alert_list()  # the engine's own list, not the sampler's façade
    assert engine_view and all(a.end is not None for a in engine_view)
    assert s.alert_list() == engine_view


def _bad_calls():
    """(what, call) pairs: public entry points given a bad argument."""
    import nbgpu
    from nbgpu.profiles.history import keep_history
    from nbgpu.sampler import Sampler

    def with_sampler(fn):
        def call():
            s = Sampler("sim", host=False)
            try:
                return fn(s)
            finally:
                s.stop()
        return call

    def panel(**kw):
        from nbgpu.widgets.monitor import GPUMonitor

        return with_sampler(lambda s: GPUMonitor(start=False, processes=False, **kw))

    return [
        ("Sampler(gpus=1.5)", lambda: Sampler("sim", gpus=1.5).stop()),
        ("Sampler(gpus=[])", lambda: Sampler("sim", gpus=[]).stop()),
        ("request('bogus')", with_sampler(lambda s: s.request("bogus"))),
        ("alert_list('abc')", with_sampler(lambda s: s.alert_list("abc"))),
        ("add_listener(5)", with_sampler(lambda s: s.add_listener(5))),
        ("capture(gpus=[7])", with_sampler(lambda s: nbgpu.capture(s, gpus=[7]).start())),
        ("capture(gpus='zz')", with_sampler(lambda s: nbgpu.capture(s, gpus="zz").start())),
        ("capture(sampler, source)", with_sampler(lambda s: nbgpu.capture(s, source="sim"))),
        ("capture(sampler=5)", lambda: nbgpu.capture(sampler=5)),
        ("GPUMonitor(sampler=5)", panel(sampler=5)),
        ("to_jsonl(5)", with_sampler(lambda s: s.timeline.to_jsonl(5))),
        ("to_csv(None)", with_sampler(lambda s: s.timeline.to_csv(None))),
        ("keep_history(5)", lambda: keep_history(5)),
        ("track(5)", lambda: nbgpu.track(5)),
        ("Sampler(clock=5)", lambda: Sampler("sim", clock=5).stop()),
    ]


@pytest.mark.parametrize("what", [w for w, _ in _bad_calls()])
def test_bad_input_to_any_entry_point_is_a_one_line_nbgpu_error(what):
    call = dict(_bad_calls())[what]
    with pytest.raises(BadArgumentError) as info:
        call()
    assert "\n" not in str(info.value)


TESTS = Path(__file__).resolve().parent


def _test_modules():
    import ast

    for path in sorted(TESTS.glob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"), str(path))


def test_no_test_module_imports_another():
    # Shared helpers live in conftest*.py (fixtures in conftest.py); a test module imported
    # by another runs its module-level code twice and ties the two together.
    import ast

    found = []
    for path, tree in _test_modules():
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [])
            found += [f"{path.name}: imports {n}" for n in names if n.split(".")[0].startswith("test_")]
    assert not found, "\n".join(found)


def _self_privates(node) -> set[str]:
    """Every ``self._name`` set under ``node``."""
    import ast

    return {n.attr for n in ast.walk(node)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
            and n.attr.startswith("_") and not n.attr.startswith("__") and isinstance(n.ctx, ast.Store)}


def _widget_private_names() -> set[str]:
    """The private state of nbgpu's widgets: ``self._name``s set in the widget classes of
    nbgpu/widgets (and the parts they inherit) and by no class outside nbgpu/widgets (so a
    test's ``sampler._lock`` is not taken for a widget's)."""
    import ast

    widget_bases = re.compile(r"\b(widgets\.\w+|VBox|HBox|DOMWidget|PanelDrawing)\b")
    mine, others = set(), set()
    for path in sorted((ROOT / "nbgpu").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if path.parent.name != "widgets":  # a module's own private globals (session._shared)
            others |= {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
                       for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                       if isinstance(t, ast.Name) and t.id.startswith("_")}
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            is_widget = path.parent.name == "widgets" and (
                node.name == "PanelDrawing" or any(widget_bases.search(ast.unparse(b)) for b in node.bases))
            if is_widget:
                mine |= _self_privates(node)
            elif path.parent.name != "widgets":
                others |= _self_privates(node)
    return mine - others


def test_no_test_reads_a_private_attribute_of_an_nbgpu_widget():
    # Widgets are tested through what a front end would see: get_state(), the messages a
    # recording comm keeps (the comm_log fixture) and the public widget tree (children).
    import ast

    private = _widget_private_names()
    assert {"_grid", "_header"} <= private  # the scan sees the panel's own state
    found = []
    for path, tree in _test_modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in private:
                found.append(f"{path.name}:{node.lineno}: .{node.attr}")
    assert not found, "\n".join(found)


def test_one_fake_clock_for_every_test_module():
    # The fake clock and the stepped sampler are conftest.py's (the clock and stepped
    # fixtures); a module-level clock class of a test's own is a copy of them.
    import ast

    copies = [f"{path.name}: class {node.name}" for path, tree in _test_modules()
              if path.name != "conftest.py" for node in tree.body
              if isinstance(node, ast.ClassDef) and node.name.lower().endswith("clock")]
    assert not copies, "\n".join(copies)


@pytest.mark.parametrize("interval", [0.005, 3600.5, float("nan")])
def test_the_interval_setting_refuses_what_a_sampler_refuses(interval):
    # %config NbGpu.interval is checked as Sampler(interval=...) is: the same bounds, the same words.
    from traitlets import TraitError

    from nbgpu import config
    from nbgpu.sampler import Sampler

    cfg = config.settings()
    before = cfg.interval
    with pytest.raises(TraitError) as refused:
        cfg.interval = interval
    with pytest.raises(BadArgumentError) as also:
        Sampler("sim", interval=interval)
    assert str(also.value).split(",")[0].replace("interval", "NbGpu.interval") in str(refused.value)
    assert cfg.interval == before
    cfg.interval = 3600.0  # the largest a sampler takes
    cfg.interval = before


@pytest.mark.parametrize("window_s", [1.0, 90000.0])
def test_the_window_setting_refuses_what_a_panel_refuses(window_s):
    from traitlets import TraitError

    from nbgpu import config

    cfg = config.settings()
    before = cfg.window_s
    with pytest.raises(TraitError, match="window_s must be a number of seconds from 5 to 86400"):
        cfg.window_s = window_s
    assert cfg.window_s == before
