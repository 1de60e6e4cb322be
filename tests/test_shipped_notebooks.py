"""The wheel ships the quickstart and Voilà notebooks as package data (issue 33, item 19)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ("quickstart.ipynb", "voila-dashboard.ipynb")


@pytest.mark.parametrize("name", SHIPPED)
def test_package_copy_matches_the_repository_notebook(name):
    """nbgpu/notebooks/ is a copy of notebooks/: edit one, copy it to the other."""
    assert (ROOT / "nbgpu" / "notebooks" / name).read_bytes() == (ROOT / "notebooks" / name).read_bytes()


def test_demo_finds_the_shipped_quickstart_through_importlib_resources(tmp_path, monkeypatch):
    from nbgpu.cli import demo

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(demo, "__file__", str(tmp_path / "a" / "b" / "c" / "demo.py"))
    found = demo.find_notebook()
    assert found == ROOT / "nbgpu" / "notebooks" / "quickstart.ipynb"
    voila = demo.shipped_notebook("voila-dashboard.ipynb")
    assert voila == ROOT / "nbgpu" / "notebooks" / "voila-dashboard.ipynb"
    root = found.parent.parent
    assert found.relative_to(root).as_posix() == "notebooks/quickstart.ipynb"


def test_wheel_lists_the_notebooks(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                          "-q", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0 and "No module named pip" in out.stderr:
        pytest.skip("pip is not installed in this interpreter")
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("nbgpu-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in SHIPPED:
        assert f"nbgpu/notebooks/{name}" in names
