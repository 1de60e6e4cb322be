"""Start-up of ``%load_ext nbgpu`` + ``%gpumon``: the sampler opens beside the panel's imports."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest
from IPython.core.error import UsageError

from conftest_panel import loaded_shell
from nbgpu import session
from nbgpu.errors import NbgpuError
from nbgpu.magics import gpumon
from nbgpu.widgets import registry

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def shell():
    yield from loaded_shell()


def test_gpumon_starts_the_sampler_off_the_main_thread(shell, monkeypatch) -> None:
    seen = []
    real = gpumon.shared_or_host_only

    def recording(source, interval):
        seen.append(threading.current_thread())
        return real(source, interval)

    monkeypatch.setattr(gpumon, "shared_or_host_only", recording)
    shell.run_line_magic("gpumon", "")  # NVML, or without it the host alone: either opens there
    assert len(seen) == 1 and seen[0] is not threading.main_thread()
    assert session.shared_sampler().running and registry.panels()[0].sampler is session.shared_sampler()
    helpers = [t.name for t in threading.enumerate() if t.name.startswith(gpumon.STARTER_THREAD)]
    assert helpers == []  # the helper has ended when the magic returns


@pytest.mark.parametrize("line", ["--source sim", "--source simulated"])
def test_simulated_gpus_start_on_the_main_thread(shell, monkeypatch, line) -> None:
    """Simulated GPUs open in pure Python: beside the imports they would only take turns."""
    seen = []

    def recording(source, interval):
        seen.append(threading.current_thread())
        raise NbgpuError("stop here")

    monkeypatch.setattr(gpumon, "shared_or_host_only", recording)
    with pytest.raises(UsageError):
        shell.run_line_magic("gpumon", line)
    assert seen == [threading.main_thread()]


def test_replacing_a_running_sampler_re_points_panels_on_the_main_thread(shell) -> None:
    """Panels rebuild their widgets when the sampler is replaced: that stays off the helper."""
    shell.run_line_magic("gpumon", "--source sim")
    seen = []
    unregister = session.on_replace(lambda old, new: seen.append(threading.current_thread()))
    try:
        shell.run_line_magic("gpumon", "--source sim --interval 0.2")
    finally:
        unregister()
    assert seen == [threading.main_thread()]
    assert {p.sampler for p in registry.panels()} == {session.shared_sampler()}


def test_a_sampler_that_cannot_start_is_one_usage_error(shell, monkeypatch) -> None:
    def failing(source, interval):
        raise NbgpuError("no such source here")

    monkeypatch.setattr(session, "ensure_sampler", failing)
    with pytest.raises(UsageError) as err:
        shell.run_line_magic("gpumon", "--source sim")
    assert str(err.value) == "%gpumon: no such source here"
    assert registry.panels() == []


def test_the_sampler_of_a_fresh_kernel_gets_its_alerts_engine() -> None:
    """Started before the panel modules (which bring diagnostics in), it still has alerts."""
    code = ("from IPython.core.interactiveshell import InteractiveShell\n"
            "sh = InteractiveShell.instance()\n"
            "sh.run_line_magic('load_ext', 'nbgpu')\n"
            "sh.run_line_magic('gpumon', '--source sim')\n"
            "from nbgpu import session\n"
            "print('DIAG', session.shared_sampler().diagnostics is not None)\n"
            "sh.run_line_magic('unload_ext', 'nbgpu')\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=True)
    assert "DIAG True" in done.stdout
