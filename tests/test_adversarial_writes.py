"""Adversarial writes (issue 34, item 5): snapshot paths nbgpu can never write are refused when
registered; a write that fails later says so once, where the notebook user sees it."""

from __future__ import annotations

import os
import shutil
import warnings

import pytest

from conftest_profiles import kernel_fixture  # noqa: F401 - fixture
from nbgpu import Sampler, SimulatedGPUs, snapshot_on_alert
from nbgpu.diagnostics.alerts import Alert
from nbgpu.errors import NbgpuError


@pytest.fixture
def sampler():
    s = Sampler(SimulatedGPUs(count=1, seed=3), interval=0.05, host=False)
    yield s
    s.stop()


def _alert() -> Alert:
    return Alert("oom_risk", "critical", 0, 1.0, None, "memory at 96 %", "")


def _user_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.mark.parametrize("kind", ["folder", "empty", "fifo"])
def test_snapshot_paths_that_can_never_be_written_are_refused_at_registration(kind, tmp_path, sampler):
    path = {"folder": str(tmp_path), "empty": "", "fifo": str(tmp_path / "pipe")}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    with pytest.raises(NbgpuError) as info:
        snapshot_on_alert(path, sampler)
    assert "\n" not in str(info.value)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
def test_a_snapshot_in_a_read_only_folder_is_refused_at_registration(tmp_path, sampler):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(NbgpuError, match="cannot write"):
            snapshot_on_alert(str(folder / "snap.json"), sampler)
    finally:
        folder.chmod(0o755)


def test_a_snapshot_that_fails_later_warns_the_user_once(tmp_path, sampler):
    folder = tmp_path / "snaps"
    folder.mkdir()
    callback = snapshot_on_alert(str(folder / "snap.json"), sampler)
    shutil.rmtree(folder)
    folder.write_text("")  # the folder is gone: every write fails, as on a read-only or full disk
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback(_alert())
        callback(_alert())
    msgs = _user_warnings(caught)
    assert len(msgs) == 1 and "snap.json" in msgs[0] and "\n" not in msgs[0]


def _stderr(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") for o in outputs if o["msg_type"] == "stream" and o["name"] == "stderr")


def test_write_failures_show_once_in_a_real_notebook(kernel, tmp_path):
    """History and snapshot writes that fail after registration: one line under a cell, once."""
    hist, snaps = tmp_path / "hist", tmp_path / "snaps"
    hist.mkdir()
    snaps.mkdir()
    reply, outputs = kernel.run(
        "%load_ext nbgpu\nimport nbgpu, shutil, threading, time\nfrom nbgpu import session\n"
        "from nbgpu.diagnostics.alerts import Alert\n"
        "_s = session.ensure_sampler('sim', 0.1)\n"
        f"nbgpu.keep_history({str(hist / 'history.jsonl')!r})\n"
        f"_cb = nbgpu.snapshot_on_alert({str(snaps / 'snap.json')!r}, _s)\n"
        f"for _d in ({str(hist)!r}, {str(snaps)!r}):\n"
        "    shutil.rmtree(_d); open(_d, 'w').close()  # gone: every write fails from now on\n")
    assert reply["status"] == "ok", outputs
    seen = ""
    for _ in range(3):
        reply, outputs = kernel.run("%%gpumon\ntime.sleep(0.3)")
        assert reply["status"] == "ok", outputs
        seen += _stderr(outputs)
        reply, outputs = kernel.run(  # the sampler thread calls on_alert callbacks: so do we here
            "_t = threading.Thread(target=_cb, args=(Alert('oom_risk', 'critical', 0, time.time(), None, "
            "'memory at 96 %', ''),)); _t.start(); _t.join()")
        assert reply["status"] == "ok", outputs
        seen += _stderr(outputs)
    assert seen.count("history file") == 1, seen
    assert seen.count("snapshot was not written") == 1, seen
