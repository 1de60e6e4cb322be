"""The diagnostics rules against real workloads (scripts/gpu/diagnostics_check.py); GPU only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
SCRIPT = Path(__file__).parents[1] / "scripts" / "gpu" / "diagnostics_check.py"


def test_real_workloads_raise_their_diagnoses(tmp_path):
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as exc:
        pytest.skip(f"NVML not available here: {exc}")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    out = tmp_path / "check.json"
    path = os.pathsep.join([str(SCRIPT.parents[2]), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONPATH=path)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], env=env,
                          capture_output=True, text=True, timeout=400)
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    failed = {k: v for k, v in report["phases"].items() if not v.get("ok", True)}
    assert not failed, json.dumps(failed, indent=1, default=str)[:6000]
