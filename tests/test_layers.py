"""Data flows one way: no nbgpu module imports one from a layer above it, lazily or not.

The layer order is the table in docs/engine.md ("Layers"), read by this test, so the docs and
the check cannot drift apart. Every import counts: at module top, inside functions (lazy),
``importlib.import_module("nbgpu...")`` and ``sys.modules["nbgpu..."]`` look-ups. Imports
under ``if TYPE_CHECKING:`` never run and only name types for annotations, so they are not
edges.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "nbgpu"
DOC = ROOT / "docs" / "engine.md"


def layer_table(text: str) -> list[list[str]]:
    """The layer rows of docs/engine.md, lowest first: each a list of module patterns."""
    section = text.split("## Layers", 1)[1]
    rows = []
    for line in section.splitlines():
        match = re.match(r"\|\s*(\d+)\s*\|(.*)\|\s*$", line)
        if match:
            rows.append((int(match.group(1)), re.findall(r"`([^`]+)`", match.group(2))))
        elif rows and not line.startswith("|"):
            break
    assert [n for n, _ in rows] == list(range(len(rows))), "layer rows must be numbered 0, 1, 2, ..."
    return [patterns for _, patterns in rows]


LAYERS = layer_table(DOC.read_text(encoding="utf-8"))


def module_name(path: Path) -> str:
    """``nbgpu/sources/nvml.py`` -> ``nbgpu.sources.nvml``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer_of(module: str) -> int:
    """The layer index of a module; patterns are ``name`` (a module) or ``name/*`` (a package)."""
    rel = module.removeprefix("nbgpu").lstrip(".").replace(".", "/") or "nbgpu/__init__"
    for index, patterns in enumerate(LAYERS):
        for pattern in patterns:
            if pattern.endswith("/*"):
                if rel == pattern[:-2] or rel.startswith(pattern[:-1]):
                    return index
            elif rel == pattern:
                return index
    raise LookupError(f"{module} is in no layer of docs/engine.md; add it to the Layers table")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _known(target: str) -> str | None:
    """The nbgpu module an import name refers to (its longest existing prefix), or None."""
    parts = target.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def imports_of(module: str, path: Path) -> set[str]:
    """Every nbgpu module ``module`` imports, at any depth of its code, outside TYPE_CHECKING."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:  # a submodule if there is one, else a name from ``base``
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0].value
            if called == "import_module" and isinstance(arg, str):
                package = module if is_package else module.rpartition(".")[0]
                if arg.startswith("."):
                    level = len(arg) - len(arg.lstrip("."))
                    found.add(_resolve(package + ".x", False, level, arg.lstrip(".") or None))
                else:
                    found.add(arg)
            elif called == "get" and _is_sys_modules(func) and isinstance(arg, str):
                found.add(arg)
        elif isinstance(node, ast.Subscript) and _is_sys_modules_name(node.value):
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.add(key.value)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in (_known(t) for t in found if t.startswith("nbgpu")) if m and m != module}


def _is_sys_modules_name(node: ast.expr) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == "modules"
            and getattr(node.value, "id", "") == "sys")


def _is_sys_modules(func: ast.expr) -> bool:
    return isinstance(func, ast.Attribute) and _is_sys_modules_name(func.value)


# The documented exceptions (docs/engine.md "Layers"): nbgpu's default views, imported on use.
ALLOWED_UPWARD = {("nbgpu.hooks", "nbgpu.widgets.cell_report")}


def backward_edges() -> dict[tuple[str, str], tuple[int, int]]:
    """``(importer, imported) -> (importer's layer, imported's layer)`` for every upward import."""
    edges = {}
    for module, path in MODULES.items():
        here = layer_of(module)
        for target in imports_of(module, path):
            there = layer_of(target)
            if there > here and (module, target) not in ALLOWED_UPWARD:
                edges[(module, target)] = (here, there)
    return edges


def test_every_module_has_a_layer():
    unplaced = []
    for module in MODULES:
        try:
            layer_of(module)
        except LookupError as exc:
            unplaced.append(str(exc))
    assert not unplaced, "\n".join(unplaced)


def test_every_layer_row_names_a_module_that_exists():
    missing = []
    for index, patterns in enumerate(LAYERS):
        for pattern in patterns:
            rel = pattern[:-2] if pattern.endswith("/*") else pattern
            name = "nbgpu" if rel == "nbgpu/__init__" else "nbgpu." + rel.replace("/", ".")
            if name not in MODULES:
                missing.append(f"layer {index}: `{pattern}` names no module in nbgpu/")
    assert not missing, "\n".join(missing)


def test_no_module_imports_a_higher_layer():
    new = backward_edges()
    assert not new, "backward imports (importer -> imported, layers):\n" + "\n".join(
        f"  {a} -> {b}  ({la} -> {lb})" for (a, b), (la, lb) in sorted(new.items())
    )


SAMPLE = '''
import nbgpu.store
from . import session
from ..widgets.monitor import GPUMonitor
import importlib, sys
def later():
    from ..diagnostics import engine
    importlib.import_module("nbgpu.cli.record")
    sys.modules["nbgpu.profiles.capture"]
    sys.modules.get("nbgpu.svg")
if TYPE_CHECKING:
    from ..magics import gpumon
'''


def test_the_walker_sees_lazy_and_dynamic_imports(tmp_path):
    path = tmp_path / "sample.py"
    path.write_text(SAMPLE, encoding="utf-8")
    seen = imports_of("nbgpu.sources.sample", path)
    assert {"nbgpu.store", "nbgpu.sources", "nbgpu.widgets.monitor", "nbgpu.diagnostics.engine",
            "nbgpu.cli.record", "nbgpu.profiles.capture", "nbgpu.svg"} <= seen
    assert "nbgpu.magics.gpumon" not in seen


@pytest.mark.parametrize(("module", "layer"), [
    ("nbgpu.errors", 0), ("nbgpu.diagnostics.engine", 3), ("nbgpu.sources.nvml", 1), ("nbgpu.sampler", 4),
    ("nbgpu.widgets.cell_report", 7), ("nbgpu.svg", 3), ("nbgpu", len(LAYERS) - 1),
])
def test_layer_table_places_modules(module, layer):
    assert layer_of(module) == layer


def test_every_module_is_at_most_450_lines():
    """A module does one job: none is longer than 450 lines (CONTRIBUTING, STYLE)."""
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > 450}
    assert long == {}


def test_no_two_modules_share_a_name():
    """A newcomer finds a module by its name: ``cli/report.py`` beside ``profiles/report.py`` misleads."""
    names: dict[str, list[str]] = {}
    for p in PACKAGE.rglob("*.py"):
        if p.name not in ("__init__.py", "__main__.py"):
            names.setdefault(p.stem, []).append(str(p.relative_to(ROOT)))
    assert {k: v for k, v in names.items() if len(v) > 1} == {}
