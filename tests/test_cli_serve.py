"""`nbgpu export` and `nbgpu demo` as real processes: they listen on 127.0.0.1 and stop cleanly."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

NBGPU = [sys.executable, "-m", "nbgpu.cli"]


def wait_line(stream, pattern: str, timeout_s: float = 60) -> re.Match:
    """Read lines from ``stream`` until one matches ``pattern``."""
    deadline = time.time() + timeout_s
    seen = []
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matching {pattern!r} in {seen}")


def get(url: str, timeout_s: float = 60) -> int:
    deadline = time.time() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                return resp.status
        except (urllib.error.URLError, ConnectionError):
            if time.time() > deadline:
                raise
            time.sleep(0.5)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_export_serves_until_terminated():
    proc = subprocess.Popen([*NBGPU, "export", "--source", "sim", "--port", "0", "--hostname", "n1"],
                            stderr=subprocess.PIPE, text=True)
    try:
        m = wait_line(proc.stderr, r"serving 2 GPU\(s\) \(SIMULATED\) at (http://127\.0\.0\.1:(\d+)/metrics)")
        # labels in any order: gpu "0" and the Hostname given
        util = re.compile(r'^DCGM_FI_DEV_GPU_UTIL\{(?=[^}]*\bgpu="0")(?=[^}]*\bHostname="n1")[^}]*\} \d',
                          re.M)
        deadline, body = time.time() + 20, ""
        while time.time() < deadline and not util.search(body):  # until the first readings are served
            with urllib.request.urlopen(m.group(1), timeout=5) as resp:
                body = resp.read().decode()
            time.sleep(0.2)
        assert util.search(body), body[:2000]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        assert not port_open(int(m.group(2)))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()


def test_demo_opens_the_quickstart_notebook_on_localhost(tmp_path):
    (tmp_path / "notebooks").mkdir()
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("%load_ext nbgpu")]
    nbformat.write(nb, str(tmp_path / "notebooks" / "quickstart.ipynb"))
    proc = subprocess.Popen([*NBGPU, "demo", "--no-browser"], cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        m = wait_line(proc.stdout, r"open (http://127\.0\.0\.1:(\d+)/lab/tree/notebooks/quickstart\.ipynb"
                                   r"\?token=\w+)")
        assert get(m.group(1), timeout_s=90) == 200
        contents = m.group(1).replace("/lab/tree/", "/api/contents/")
        assert get(contents) == 200
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        deadline = time.time() + 15
        while port_open(int(m.group(2))) and time.time() < deadline:
            time.sleep(0.3)
        assert not port_open(int(m.group(2))), "JupyterLab kept running after nbgpu demo stopped"
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()


def test_demo_without_notebook_says_where_to_run_it(tmp_path, monkeypatch):
    from nbgpu.cli import demo
    from nbgpu.errors import NbgpuError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(demo, "__file__", str(tmp_path / "a" / "b" / "c" / "demo.py"))
    monkeypatch.setattr(demo, "shipped_notebook", lambda name: None)
    with pytest.raises(NbgpuError, match="run `nbgpu demo` from the nbgpu repository folder"):
        demo.find_notebook()


def test_demo_finds_the_repository_notebook_from_any_folder(tmp_path, monkeypatch):
    """Run from elsewhere, `nbgpu demo` finds notebooks/quickstart.ipynb beside the package."""
    from nbgpu.cli import demo

    monkeypatch.chdir(tmp_path)
    repo = Path(__file__).resolve().parents[1]
    assert demo.find_notebook() == repo / "notebooks" / "quickstart.ipynb"
