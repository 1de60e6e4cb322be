"""The public surface: ``nbgpu.__all__`` and the names in the namespace agree, and every dotted
``nbgpu.x.y`` name the README and docs use resolves after a plain ``import nbgpu``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import nbgpu

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PUBLIC_DUNDERS = {"__version__"}


def public_members(module: types.ModuleType) -> set[str]:
    """Non-private names bound in a module's namespace, submodules excepted (they are dotted paths)."""
    names = set(vars(module)) | set(getattr(module, "_LAZY", {}))
    return {
        n for n in names
        if (not n.startswith("_") or n in PUBLIC_DUNDERS)
        and not isinstance(getattr(module, n), types.ModuleType)
        and n not in {"annotations", "TYPE_CHECKING"}
    }


def test_all_is_sorted_and_unique():
    assert nbgpu.__all__ == sorted(set(nbgpu.__all__))


def test_every_all_name_resolves():
    missing = [n for n in nbgpu.__all__ if not hasattr(nbgpu, n)]
    assert not missing


def test_every_public_name_is_in_all():
    assert public_members(nbgpu) == set(nbgpu.__all__)


def test_dir_lists_the_lazy_names():
    assert set(nbgpu.__all__) <= set(dir(nbgpu))


def test_capture_is_a_public_type():
    assert isinstance(nbgpu.Capture, type)
    with nbgpu.Sampler(source="sim", interval=0.1) as s, nbgpu.capture(s) as cap:
        pass
    assert isinstance(cap, nbgpu.Capture)


def test_errors_share_one_root():
    for name in ("BadArgumentError", "SamplerStateError", "NVMLUnavailableError", "SourceError", "FileError"):
        assert issubclass(getattr(nbgpu, name), nbgpu.NbgpuError)
    assert issubclass(nbgpu.BadArgumentError, ValueError)
    assert not issubclass(nbgpu.SamplerStateError, nbgpu.BadArgumentError)


def test_nvml_unavailable_carries_code_and_hint_as_fields():
    exc = nbgpu.NVMLUnavailableError("NVML is not available (driver not loaded); load it", code=9,
                                     hint="load it")
    assert (exc.code, exc.hint) == (9, "load it")
    assert "\n" not in str(exc) and str(exc).startswith("NVML is not available")


def _package_modules() -> list[str]:
    out = []
    for init in sorted((ROOT / "nbgpu").rglob("__init__.py")):
        out.append(".".join(init.parent.relative_to(ROOT).parts))
    return out


@pytest.mark.parametrize("package", _package_modules())
def test_package_all_names_resolve(package):
    module = __import__(package, fromlist=["_"])
    missing = [n for n in getattr(module, "__all__", []) if not hasattr(module, n)]
    assert not missing


@pytest.mark.parametrize("package", [p for p in _package_modules() if p != "nbgpu"])
def test_a_package_has_more_than_one_module(package):
    """A package of one module is a module."""
    folder = ROOT.joinpath(*package.split("."))
    modules = [p for p in folder.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(modules) >= 2 or ((folder / "__main__.py").exists() and modules)


DOTTED = re.compile(r"\bnbgpu(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


def documented_names() -> dict[str, str]:
    """Every ``nbgpu.x[.y...]`` in README.md and docs/*.md -> the first file naming it."""
    found: dict[str, str] = {}
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for match in DOTTED.finditer(text):
            name = match.group(0)
            if text[match.end():match.end() + 3] == ".md" or text[max(0, match.start() - 1)] in "/-":
                continue  # a file name (nbgpu.md, out/nbgpu.json), not a Python name
            found.setdefault(name, path.name)
    return found


RESOLVE = """
import importlib, json, sys
import nbgpu
bad = {}
for name in json.loads(sys.argv[1]):
    obj = nbgpu
    for part in name.split(".")[1:]:
        try:
            obj = getattr(obj, part)
        except AttributeError as exc:
            bad[name] = str(exc)
            break
print(json.dumps(bad))
"""


def test_every_documented_dotted_name_resolves_after_import_nbgpu():
    names = documented_names()
    assert "nbgpu.exporter.serve" in names and "nbgpu.profiles.callbacks.keras_callback" in names
    done = subprocess.run([sys.executable, "-c", RESOLVE, json.dumps(sorted(names))], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=True)
    bad = json.loads(done.stdout.strip().splitlines()[-1])
    assert not bad, {name: (names[name], why) for name, why in bad.items()}


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_thing'"):
        _ = nbgpu.no_such_thing


def test_report_view_comes_from_the_registered_hook():
    from nbgpu import hooks
    from nbgpu.widgets.cell_report import CellReport

    assert isinstance(hooks.view("cell_report", object()), CellReport)
