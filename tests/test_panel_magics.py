"""%gpumon and %%gpumon in an in-process IPython shell: options, help, lifecycle, delegation."""

from __future__ import annotations

import threading

import pytest
from IPython.core.error import UsageError

from conftest_panel import loaded_shell, row_titles
from nbgpu import session
from nbgpu.magics import options
from nbgpu.widgets import registry

_before: set[threading.Thread] = set()


def _nbgpu_threads() -> list[str]:
    """nbgpu threads started since the test began (other tests' leftovers don't count)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("nbgpu") and t not in _before)


@pytest.fixture
def shell():
    _before.clear()
    _before.update(threading.enumerate())
    yield from loaded_shell()


def test_parse_every_option() -> None:
    o = options.parse_line("--source sim --interval 0.2 --window 120 --gpus 0,1 "
                           "--metrics util,tensor,mem --refresh 0.5")
    assert (o.action, o.source, o.interval, o.window_s, o.gpus, o.metrics, o.refresh_s) == \
        ("start", "sim", 0.2, 120.0, "0,1", ("util", "sm", "mem"), 0.5)
    assert options.parse_line("stop").action == "stop"
    assert options.parse_line("--cells").cells == "on"
    assert options.parse_line("--cells-min 2").cells_min_s == 2.0
    assert options.parse_line("--cells off").cells == "off"
    assert options.parse_line("--source prometheus=http://127.0.0.1:9090").source.startswith("prometheus=")
    assert options.parse_cell_line("--gpus 1 --interval 0.1").gpus == "1"


@pytest.mark.parametrize("line, named", [
    ("--interval -1", "--interval"), ("--interval abc", "--interval"), ("--window 1", "--window"),
    ("--metrics bogus", "bogus"), ("--bogus", "--bogus"), ("pause", "pause"),
    ("--refresh 0.1", "--refresh"), ("--source cuda", "cuda"), ("--gpus 0,,1", "--gpus"),
    ("--cells maybe", "--cells"), ("--source 'sim", "cannot read"),
])
def test_bad_lines_are_one_usage_error(line: str, named: str) -> None:
    with pytest.raises(UsageError) as err:
        options.parse_line(line)
    assert named in str(err.value) and "\n" not in str(err.value)
    assert str(err.value).startswith("%gpumon: ")


def test_cell_magic_takes_only_sampler_options() -> None:
    with pytest.raises(UsageError, match="--window"):
        options.parse_cell_line("--window 30")


def test_help_lists_every_option(shell) -> None:
    doc = shell.find_line_magic("gpumon").__doc__
    for action in options.line_parser()._actions:
        for flag in action.option_strings:
            assert flag in doc
    for word in ("start", "stop", "status", "%%gpumon", "util", "sm", "pcie"):
        assert word in doc


def test_load_message_is_one_line(capsys) -> None:
    from nbgpu.magics.extension import load_message

    msg = load_message()
    assert msg.startswith("nbgpu ") and "\n" not in msg
    assert ("GPU" in msg and "driver" in msg) or "--source sim" in msg


def test_panels_share_one_sampler_and_stop_status(shell, capsys) -> None:
    shell.run_line_magic("gpumon", "--source sim --interval 0.1")
    shell.run_line_magic("gpumon", "--gpus 1 --metrics util")
    assert _nbgpu_threads().count("nbgpu-sampler") == 1  # the panels share one sampler thread
    panels = registry.panels()
    assert len(panels) == 2 and panels[0].sampler is panels[1].sampler
    panels[1].refresh(force=True)
    assert row_titles(panels[1]) == ["GPU 1", "host"]
    capsys.readouterr()
    shell.run_line_magic("gpumon", "status")
    out = capsys.readouterr().out
    assert "sampler: running" in out and "panels: 2 updating" in out
    shell.run_line_magic("gpumon", "stop")
    assert _nbgpu_threads() == []
    assert "stopped the sampler and 2 panel(s)" in capsys.readouterr().out
    shell.run_line_magic("gpumon", "")  # starts again with the same settings
    assert session.shared_sampler().running and session.shared_sampler().simulated


def test_bad_gpu_starts_nothing(shell) -> None:
    with pytest.raises(UsageError, match="GPU index 7 is out of range"):
        shell.run_line_magic("gpumon", "--source sim --gpus 7")
    assert _nbgpu_threads() == [] and session.shared_sampler() is None


def test_reload_and_unload_leave_nothing_running(shell) -> None:
    shell.run_line_magic("gpumon", "--source sim")
    shell.run_line_magic("reload_ext", "nbgpu")
    assert _nbgpu_threads() == [] and registry.panels() == []
    shell.run_line_magic("gpumon", "--source sim")
    shell.run_line_magic("unload_ext", "nbgpu")
    assert _nbgpu_threads() == []
    assert "gpumon" not in shell.magics_manager.magics["line"]
    assert "gpumon" not in shell.magics_manager.magics["cell"]


def test_cell_magic_delegates_to_profiles(shell, monkeypatch) -> None:
    import nbgpu.profiles.cells as cells

    calls = []
    monkeypatch.setattr(cells, "run_profiled_cell",
                        lambda sh, cell, sampler, gpus=None: calls.append((sh, cell, sampler, gpus)))
    shell.run_cell_magic("gpumon", "--source sim --gpus 1", "x = 1\n")
    assert len(calls) == 1
    sh, cell, sampler, gpus = calls[0]
    assert sh is shell and cell == "x = 1\n" and gpus == [1]
    assert sampler is session.shared_sampler() and sampler.simulated
    with pytest.raises(UsageError):
        shell.run_cell_magic("gpumon", "--interval nope", "y = 2\n")
    assert len(calls) == 1


def test_cells_mode_switches(shell, monkeypatch) -> None:
    import nbgpu.profiles.cells as cells

    seen = []
    monkeypatch.setattr(cells, "enable_cell_mode",
                        lambda sh, get, min_duration_s=None: seen.append(("on", get(), min_duration_s)))
    monkeypatch.setattr(cells, "disable_cell_mode", lambda sh: seen.append(("off",)))
    shell.run_line_magic("gpumon", "--cells --cells-min 3 --source sim")
    assert seen[0][0] == "on" and seen[0][1] is session.shared_sampler() and seen[0][2] == 3.0
    shell.run_line_magic("gpumon", "--cells off")
    assert seen[-1] == ("off",)
    assert registry.panels() == []  # --cells alone opens no panel


def test_the_cells_setting_says_what_the_magics_did_and_turns_profiling_back_on(shell) -> None:
    from nbgpu.config import settings
    from nbgpu.profiles.cells import cell_mode_enabled

    shell.run_line_magic("gpumon", "--source sim --cells")
    assert settings().cells == "on" and cell_mode_enabled()
    shell.run_line_magic("gpumon", "stop")
    assert settings().cells == "off" and not cell_mode_enabled()
    shell.run_line_magic("config", "NbGpu.cells = 'on'")  # on again after a stop
    assert cell_mode_enabled()
    shell.run_line_magic("gpumon", "--cells off")
    assert settings().cells == "off" and not cell_mode_enabled()


def test_stop_also_ends_per_cell_profiles(shell, capsys) -> None:
    from nbgpu.profiles.cells import cell_mode_enabled

    shell.run_line_magic("gpumon", "--source sim --cells")
    assert cell_mode_enabled()
    shell.run_line_magic("gpumon", "stop")
    assert "and per-cell profiles" in capsys.readouterr().out
    assert not cell_mode_enabled()
    shell.run_cell("x = 1")
    assert _nbgpu_threads() == []  # nothing restarted the sampler behind the user's back


@pytest.mark.parametrize("line", [
    "--interval 1 --interval 2", "--int 1 --interval 2", "--interval=1 --interval 2",
    "--gpus 0 --gpus 1", "--cells --cells off", "--window 30 --window 40 --source sim",
])
def test_an_option_given_twice_is_one_usage_error(shell, line: str) -> None:
    with pytest.raises(UsageError) as err:
        shell.run_line_magic("gpumon", line)
    assert "twice" in str(err.value) and "\n" not in str(err.value)
    assert _nbgpu_threads() == [] and session.shared_sampler() is None


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_flag_shows_the_help_and_starts_nothing(shell, capsys, flag: str) -> None:
    shell.run_line_magic("gpumon", f"--source sim {flag}")
    out = capsys.readouterr().out
    assert "usage: %gpumon" in out and "--interval" in out and "unrecognized" not in out
    shell.run_cell_magic("gpumon", flag, "ran = True\n")
    assert "usage: %%gpumon" in capsys.readouterr().out and "ran" not in shell.user_ns
    assert _nbgpu_threads() == [] and session.shared_sampler() is None


@pytest.mark.parametrize("line", ["status --gpus 5", "stop --interval 1", "status --source sim",
                                  "stop --cells off"])
def test_status_and_stop_refuse_options_they_would_ignore(shell, line: str) -> None:
    with pytest.raises(UsageError) as err:
        shell.run_line_magic("gpumon", line)
    assert "takes no options" in str(err.value) and "\n" not in str(err.value)
    assert _nbgpu_threads() == []


@pytest.mark.parametrize("value", ["0.001", "1e-9", "0.0099"])
def test_interval_below_the_floor_is_one_usage_error(shell, value: str) -> None:
    from nbgpu.config import MIN_INTERVAL_S

    for magic in ("line", "cell"):
        with pytest.raises(UsageError) as err:
            if magic == "line":
                shell.run_line_magic("gpumon", f"--source sim --interval {value}")
            else:
                shell.run_cell_magic("gpumon", f"--interval {value}", "x = 1\n")
        text = str(err.value)
        assert f"{MIN_INTERVAL_S * 1000:g} ms" in text and "--interval" in text and "\n" not in text
    assert _nbgpu_threads() == [] and session.shared_sampler() is None


def test_status_shows_errors_and_processes_per_gpu(shell, capsys, monkeypatch) -> None:
    from nbgpu import Sampler, SimulatedGPUs
    from nbgpu.units import fmt_bytes

    gpus = SimulatedGPUs(count=2, seed=0)
    gpus.inject_error("nvmlDeviceGetTemperature", 999, gpu=1)
    gpus.add_process(0, 4242, 3 * 2**30, name="python", user="someone")
    now = [1000.0]
    s = Sampler(source=gpus, interval=0.5, clock=lambda: now[0], diagnostics=False)
    for _ in range(6):
        now[0] += 0.5
        s.step(now[0])
    monkeypatch.setattr(session, "shared_sampler", lambda: s)
    shell.run_line_magic("gpumon", "status")
    out = capsys.readouterr().out
    st = s.status()
    assert st.errors_by_gpu.get(1, 0) > 0 and not st.errors_by_gpu.get(0)
    assert f"nbgpu GPU 1: {st.errors_by_gpu[1]} error(s), last: {st.last_error_by_gpu[1]}" in out
    assert "nbgpu GPU 0: " not in out.replace("nbgpu GPU 0 processes", "")
    procs = s.processes()[0]
    held = sum(p.used_bytes for p in procs if p.used_bytes is not None)
    assert f"nbgpu GPU 0 processes: {len(procs)}, holding {fmt_bytes(held)}" in out
    s.stop()


def test_the_command_and_the_magic_share_one_option_table(capsys) -> None:
    from nbgpu.cli import build_parser
    from nbgpu.cli.shared_options import SHARED

    sub = build_parser()._subparsers._group_actions[0].choices
    for parser in (options.line_parser(), options.cell_parser(), sub["record"], sub["export"]):
        by_flag = {a.option_strings[0]: a for a in parser._actions if a.option_strings}
        for name in ("source", "interval"):
            opt = by_flag[f"--{name}"]
            assert opt.type is SHARED[name]["type"] and opt.help.startswith(SHARED[name]["help"])


@pytest.mark.parametrize("argv", [["record", "--interval", "1", "--interval", "2", "--", "true"],
                                  ["record", "--interval", "1e-9", "--", "true"],
                                  ["export", "--port", "1", "--port", "2"]])
def test_the_command_refuses_the_same_lines_in_one_line(capsys, argv) -> None:
    from nbgpu.cli import main

    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2 and err.count("\n") == 1 and err.startswith(f"nbgpu {argv[0]}: error:")


def test_stopped_panels_leave_the_registry_and_stop_counts_running_ones(shell, capsys) -> None:
    """Issue 34: 30 open/stop cycles leave no stopped panel in the registry; with one panel
    running, ``%gpumon stop`` says one."""
    for _ in range(30):
        shell.run_line_magic("gpumon", "--source sim --interval 0.1")
        registry.panels()[-1].stop()
    assert registry.panels() == []
    shell.run_line_magic("gpumon", "")
    capsys.readouterr()
    shell.run_line_magic("gpumon", "status")
    assert "panels: 1 updating" in capsys.readouterr().out
    shell.run_line_magic("gpumon", "stop")
    assert "stopped the sampler and 1 panel(s)" in capsys.readouterr().out


def test_a_panel_that_cannot_be_built_leaves_no_widget_and_no_late_traceback() -> None:
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import gc, ipywidgets\n"
            "from nbgpu.widgets.monitor import GPUMonitor\n"
            "before = len(ipywidgets.widgets.widget._instances)\n"
            "for kw in (dict(source='prometheus=http://127.0.0.1:1'), dict(source='sim', gpus=[9])):\n"
            "    try:\n"
            "        GPUMonitor(**kw)\n"
            "    except Exception as exc:\n"
            "        print('refused:', type(exc).__name__)\n"
            "gc.collect()\n"
            "print('left:', len(ipywidgets.widgets.widget._instances) - before)\n")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(root)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("refused:") == 2 and "left: 0" in done.stdout, done.stdout
    assert "Exception ignored" not in done.stderr and "Traceback" not in done.stderr, done.stderr
