"""Smoke run of ``python -m benchmarks --quick``: it completes and writes the results JSON.

Timings are not asserted (this machine's figures are not the point); the structure is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TOP_KEYS = {"schema", "device", "driver", "gpu_count", "command", "quick", "started_utc", "host",
            "packages", "targets", "benchmarks"}
TARGET_KEYS = {"name", "value", "unit", "target", "met", "benchmark"}


def _names() -> list[tuple[str, str]]:
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.registry import all_benchmarks
    finally:
        sys.path.remove(str(REPO))
    return [(b.name, b.part) for b in all_benchmarks()]


def _quick(tmp_path: Path, only: list[str]) -> tuple[subprocess.CompletedProcess, dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO),
                                                                   os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", ",".join(only),
                           "--out", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = list(tmp_path.glob("*.json"))
    assert len(files) == 1, files
    assert files[0].name.endswith("-quick.json")
    return done, json.loads(files[0].read_text())


def test_quick_run_writes_results_json(tmp_path: Path) -> None:
    """The whole harness once: every GPU benchmark (skipped without a GPU) and one CPU one."""
    gpu_names = [n for n, part in _names() if part == "gpu"]
    done, doc = _quick(tmp_path, [*gpu_names, "store_24h"])
    assert doc.keys() >= TOP_KEYS
    assert doc["quick"] is True and doc["command"].startswith("python -m benchmarks --quick")
    assert doc["packages"]["nbgpu"]
    records = doc["benchmarks"]
    gpu_here = doc["gpu_count"] > 0
    for name in [*gpu_names, "store_24h"]:
        rec = records[name]
        assert rec["status"] in ("ok", "skipped"), (name, rec)
        if rec["status"] == "skipped":
            assert rec["reason"], name
        if not gpu_here and name in gpu_names:
            assert rec["status"] == "skipped" and "no usable GPU" in rec["reason"]
    assert records["store_24h"]["status"] == "ok"
    for t in doc["targets"]:
        assert t.keys() >= TARGET_KEYS
        assert t["met"] in (True, False, None)
    assert any(t["benchmark"] == "store_24h" for t in doc["targets"])
    assert "targets" in done.stdout and "wrote" in done.stdout


@pytest.mark.parametrize("name", [n for n, part in _names() if part == "cpu" and n != "store_24h"])
def test_each_cpu_benchmark_runs_here(name: str, tmp_path: Path) -> None:
    """Everything a CPU benchmark needs is installed here: none may be skipped or fail."""
    _, doc = _quick(tmp_path, [name])
    rec = doc["benchmarks"][name]
    assert rec["status"] == "ok", (name, rec)


def test_unknown_benchmark_name_is_refused(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "nope", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "unknown benchmark(s): nope" in done.stdout
    assert not list(tmp_path.glob("*.json"))


def test_a_second_run_the_same_day_keeps_the_first_runs_file(tmp_path: Path) -> None:
    """Two runs into one folder on one day: two files, the first run's figures intact."""
    _quick(tmp_path, ["import_time"])
    first = next(tmp_path.glob("*.json"))
    before = first.read_bytes()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(REPO),
                                                                   os.environ.get("PYTHONPATH")) if p))
    done = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--only", "store_24h",
                           "--out", str(tmp_path)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    files = sorted(tmp_path.glob("*.json"))
    assert len(files) == 2, files
    assert first.read_bytes() == before
    second = next(f for f in files if f != first)
    assert "store_24h" in json.loads(second.read_text())["benchmarks"]
    assert f"wrote {second}" in done.stdout or second.name in done.stdout
