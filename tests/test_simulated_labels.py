"""Simulated data says SIMULATED wherever a person reads it: the terminal, reports, compare, cells."""

from __future__ import annotations

import subprocess
import sys

import pytest

import nbgpu
from conftest_profiles import clean_profiles_fixture  # noqa: F401 - fixture
from nbgpu.cli import main
from nbgpu.cli.record import status_lines

NBGPU = [sys.executable, "-m", "nbgpu.cli"]


def _record(path, seconds: float = 1.0) -> subprocess.CompletedProcess:
    proc = subprocess.run([*NBGPU, "record", "--source", "sim", "--interval", "0.2", "-o", str(path), "--",
                           sys.executable, "-c", f"import time; time.sleep({seconds})"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("sim")
    return {ext: (d / f"run.{ext}", _record(d / f"run.{ext}")) for ext in ("jsonl", "csv")}


def test_record_terminal_lines_say_simulated(recorded):
    gpu_lines = [line for line in recorded["jsonl"][1].stderr.splitlines() if "GPU" in line]
    assert len(gpu_lines) >= 3
    assert all("SIMULATED" in line for line in gpu_lines), gpu_lines


def test_the_live_status_lines_say_simulated():
    s = nbgpu.Sampler(source="sim", interval=0.2).start()
    try:
        lines = status_lines(s)
    finally:
        s.stop()
    assert len(lines) == 2 and all("SIMULATED" in line for line in lines), lines


def test_a_csv_recordings_report_names_its_simulated_gpus(recorded, tmp_path, capsys):
    out = tmp_path / "report.html"
    assert main(["report", str(recorded["csv"][0]), "-o", str(out)]) == 0
    page = out.read_text()
    assert "SIMULATED" in page
    assert page.count("NVIDIA H200 (simulated)") >= 2  # each GPU's name in the table
    assert "CSV keeps no command or source" in page


def test_compare_of_simulated_runs_says_so(recorded, tmp_path, capsys):
    out = tmp_path / "compare.html"
    run = str(recorded["jsonl"][0])
    assert main(["compare", run, str(recorded["csv"][0]), "-o", str(out)]) == 0
    assert "SIMULATED" in capsys.readouterr().out
    assert "SIMULATED" in out.read_text()


def test_the_cells_one_line_says_simulated(clean_profiles):
    s = nbgpu.Sampler(nbgpu.SimulatedGPUs(count=1), interval=0.1).start()
    try:
        with nbgpu.capture(sampler=s) as cap:
            pass
    finally:
        s.stop()
    assert "SIMULATED" in cap.one_line(), cap.one_line()
