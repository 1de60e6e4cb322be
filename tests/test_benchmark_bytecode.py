"""The start-up benchmarks tell a module compiled from source from one loaded as bytecode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import REPO_ROOT
from benchmarks.bytecode import by_package, precompile

_CHILD = ("import json, sys; import pkgdemo.inner; from benchmarks.bytecode import compiled_here; "
          "print(json.dumps([m for m in compiled_here(float(sys.argv[1])) if m.startswith('pkgdemo')]))")


def _package(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkgdemo"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "inner.py").write_text("Y = 2\n")
    return pkg


def _compiled_in_child(tmp_path: Path, write_bytecode: bool) -> list[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO_ROOT)]))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    since_s = time.time()  # the child's imports begin after this
    done = subprocess.run([sys.executable, "-c", _CHILD, repr(since_s)], env=env,
                          capture_output=True, text=True, check=True, timeout=60)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_modules_without_bytecode_are_compiled_in_every_process_that_cannot_write_it(tmp_path) -> None:
    _package(tmp_path)
    assert _compiled_in_child(tmp_path, write_bytecode=False) == ["pkgdemo", "pkgdemo.inner"]
    assert _compiled_in_child(tmp_path, write_bytecode=False) == ["pkgdemo", "pkgdemo.inner"]


def test_bytecode_written_by_the_imports_measured_counts_as_compiled_and_not_the_next_time(tmp_path) -> None:
    _package(tmp_path)
    assert _compiled_in_child(tmp_path, write_bytecode=True) == ["pkgdemo", "pkgdemo.inner"]
    assert _compiled_in_child(tmp_path, write_bytecode=True) == []


def test_precompiled_modules_load_as_bytecode_and_a_changed_source_is_compiled_again(tmp_path) -> None:
    pkg = _package(tmp_path)
    assert precompile(pkg)
    assert _compiled_in_child(tmp_path, write_bytecode=False) == []
    (pkg / "inner.py").write_text("Y = 3  # changed, so its bytecode is stale\n")
    assert _compiled_in_child(tmp_path, write_bytecode=False) == ["pkgdemo.inner"]


def test_by_package_counts_roots_among_the_cells_imports_only() -> None:
    compiled = ["nbgpu", "nbgpu.store", "ipywidgets.widgets", "IPython.core"]
    cell = {"nbgpu", "nbgpu.store", "ipywidgets.widgets"}
    assert by_package(compiled, cell) == {"nbgpu": 2, "ipywidgets": 1}
    assert by_package(compiled) == {"nbgpu": 2, "ipywidgets": 1, "IPython": 1}
