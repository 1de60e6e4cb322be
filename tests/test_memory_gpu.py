"""Memory by name after a real CUDA OOM (scripts/gpu/memory_by_name_oom.py); its dry run anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[1] / "scripts" / "gpu" / "memory_by_name_oom.py"


def run_script(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "memory-by-name.json"
    path = os.pathsep.join([str(SCRIPT.parents[2]), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), *args], env=env,
                          capture_output=True, text=True, timeout=400)
    assert out.exists(), proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.gpu
def test_after_a_cuda_oom_the_names_sum_to_allocated_and_free_gives_the_memory_back(nvml, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    report = run_script(tmp_path)
    figures = {k: report.get(k) for k in ("before_used", "after_oom_used", "after_free_used", "allocated",
                                          "named_bytes", "named_plus_unreachable_vs_allocated_pct",
                                          "after_free_minus_before_gib", "post_mortem")}
    assert report["cells"]["oom"]["status"] == "OutOfMemoryError", report["cells"]["oom"]
    assert all(report["checks"].values()), json.dumps({"checks": report["checks"], **figures}, indent=1)


@pytest.mark.kernel
def test_the_scripts_dry_run_names_the_holders_on_cpu_tensors(tmp_path):
    pytest.importorskip("torch")
    report = run_script(tmp_path, "--cpu")
    checks = report["checks"]
    assert checks["table_names_blocks"] and checks["table_names_the_traceback"], report.get("table")
    assert checks["post_mortem_names_blocks"] and checks["post_mortem_says_what_free_traceback_gives"], \
        report["post_mortem"]
    assert report["cells"]["free"]["stdout"].startswith("nbgpu: freed blocks, the last traceback")


CONTAINER = Path(__file__).parents[1] / "scripts" / "gpu" / "container_pids.py"


@pytest.mark.gpu
def test_in_a_new_pid_namespace_this_kernel_is_found_on_the_gpu(nvml, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    out = tmp_path / "container-pids.json"
    path = os.pathsep.join([str(CONTAINER.parents[2]), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(CONTAINER), "--out", str(out)], capture_output=True, text=True,
                          timeout=500, env=dict(os.environ, PYTHONPATH=path))
    assert out.exists(), proc.stderr[-3000:]
    ways = json.loads(out.read_text())["ways"]
    assert ways["as_is"]["checks"] and all(ways["as_is"]["checks"].values()), ways["as_is"]
    measured = {w: e for w, e in ways.items() if e["permitted"]}
    for way, entry in measured.items():
        assert entry["checks"] and all(entry["checks"].values()), (way, entry)
    if len(measured) < len(ways):
        import warnings

        warnings.warn(f"not measured here: {sorted(set(ways) - set(measured))}: "
                      f"{next(e.get('error', '') for e in ways.values() if not e['permitted'])[:300]}",
                      stacklevel=1)
