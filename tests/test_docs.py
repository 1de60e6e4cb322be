"""Docs that cannot drift: every Python and shell block of README.md and docs/ runs exactly as
a reader pastes it, on simulated GPUs, and the documented command-line options are the parser's.

Blocks are found with mktestdocs. A block's fence says where it runs:

- `` ```python `` and `` ```bash `` run here, in CI, with no GPU. Python blocks of one file
  run in order in one in-process IPython shell (so ``%gpumon`` lines run too), as cells of
  a fresh notebook: nothing is imported or defined for them, so a block that needs
  ``import nbgpu``, ``%load_ext nbgpu`` or a stand-in for the reader's training code says
  so itself. Shell blocks run with ``bash -e`` in a fresh temporary folder where only the
  ``nbgpu`` package (and its ``nbgpu`` command) can be imported, not this repository's
  other folders. A ``print(...)`` line followed by ``# ...`` comment lines documents what
  it prints: those lines must be in what the block printed ("..." in them stands for any text).
- `` ```bash clone `` runs in a clone of the repository (its root folder).
- `` ```python gpu `` / `` ```bash gpu `` need an NVIDIA GPU: they run only where NVML
  finds one (the GPU test set), and are skipped elsewhere.
- `` ```python server `` / `` ```bash server `` need a server that is not there (a
  Prometheus at a URL of your own), run until stopped (``nbgpu export``, ``nbgpu demo``) or
  for many minutes (the whole test suite, the full benchmarks); they are not run here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mktestdocs import grab_code_blocks

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKERS = ("gpu", "server", "clone")
RUN_HERE = ("python", "bash")


def blocks(path: Path, lang: str) -> list[str]:
    """The code blocks of ``path`` whose fence info is exactly ``lang`` (e.g. ``python gpu``)."""
    return grab_code_blocks(path.read_text(encoding="utf-8"), lang=lang)


def _gpu_present() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetCount() > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return False


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """An in-process IPython shell in a fresh folder, with nothing imported or defined."""
    from IPython.core.interactiveshell import InteractiveShell

    from nbgpu import session
    from nbgpu.widgets import registry

    monkeypatch.chdir(tmp_path)
    sh = InteractiveShell.instance()
    sh.reset(new_session=False)
    if "gpumon" in sh.magics_manager.magics["line"]:
        sh.run_line_magic("unload_ext", "nbgpu")
    yield sh
    if "gpumon" in sh.magics_manager.magics["line"]:
        sh.run_line_magic("unload_ext", "nbgpu")
    registry.close_all()
    session.reset()
    for value in list(sh.user_ns.values()):
        stop = getattr(value, "stop", None)
        if type(value).__name__ in ("Sampler", "GPUMonitor") and callable(stop):
            stop()
    sh.reset(new_session=False)


PRINTED = re.compile(r"^print\(.*\n((?:#.*\n?)+)", re.M)


def documented_output(block: str) -> list[str]:
    """The comment lines right after a ``print(...)`` line: what the block says it prints."""
    return [" ".join(line.lstrip("# ").strip() for line in m.group(1).splitlines())
            for m in PRINTED.finditer(block)]


def _run_python(sh, path: Path, code: list[str], capsys) -> None:
    for i, block in enumerate(code):
        capsys.readouterr()
        result = sh.run_cell(block, silent=True)
        if not result.success:
            err = result.error_in_exec or result.error_before_exec
            raise AssertionError(f"{path.name}, python block {i + 1} failed: {err!r}\n{block}") from err
        printed = " ".join(capsys.readouterr().out.split())
        for said in documented_output(block):  # "..." in it stands for any text
            pattern = ".*?".join(re.escape(part) for part in re.split(r"\.\.\.|…", said))
            assert re.search(pattern, printed), (f"{path.name}, python block {i + 1} says it prints "
                                                 f"{said!r}; it printed {printed!r}")


def _commands(folder: Path) -> Path:
    """``nbgpu`` and ``python`` for the blocks: this interpreter's, also where nbgpu is not installed."""
    folder.mkdir(exist_ok=True)
    for name, line in (("nbgpu", f'exec "{sys.executable}" -m nbgpu.cli "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"')):
        script = folder / name
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(0o755)
    return folder


def _site(folder: Path) -> Path:
    """A folder where only the ``nbgpu`` package can be imported (as after ``pip install``)."""
    folder.mkdir(exist_ok=True)
    link = folder / "nbgpu"
    if not link.exists():
        link.symlink_to(ROOT / "nbgpu", target_is_directory=True)
    return folder


def _run_bash(path: Path, code: list[str], cwd: Path, site: Path | None = None) -> None:
    bin_dir = _commands((site or cwd) / ".bin")
    # the reader's own installed packages stay importable (where they come through PYTHONPATH),
    # the repository's folders do not
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
            if p and Path(p).resolve() != ROOT.resolve()]
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=os.pathsep.join([str(_site(site or cwd / ".site")), *kept]))
    for i, block in enumerate(code):
        done = subprocess.run(["bash", "-e", "-u", "-c", block], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, (f"{path.name}, bash block {i + 1} exited {done.returncode}:\n"
                                      f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_python_blocks_run_on_simulated_gpus(path: Path, shell, capsys) -> None:
    _run_python(shell, path, blocks(path, "python"), capsys)


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_bash_blocks_run(path: Path, tmp_path) -> None:
    _run_bash(path, blocks(path, "bash"), tmp_path)


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_clone_blocks_run_in_the_repository(path: Path, tmp_path) -> None:
    _run_bash(path, blocks(path, "bash clone"), ROOT, site=tmp_path)


def test_documented_output_is_found() -> None:
    block = 'x = 1\nprint(f"{x} %")\n# 1 %\n# (and more)\ny = 2\n'
    assert documented_output(block) == ["1 % (and more)"]


@pytest.mark.gpu
@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_gpu_blocks_run_where_there_is_a_gpu(path: Path, shell, tmp_path, capsys) -> None:
    py, sh = blocks(path, "python gpu"), blocks(path, "bash gpu")
    if not (py or sh):
        return
    if not _gpu_present():
        pytest.skip("needs an NVIDIA GPU (NVML found none)")
    _run_python(shell, path, py, capsys)
    _run_bash(path, sh, tmp_path)


FENCE = re.compile(r"^\s*```(\S*)[ \t]*(.*)$", re.M)


def test_every_code_fence_is_known() -> None:
    """A fence is untagged (output), a language that runs, or one of them with a known marker."""
    unknown = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        opening = True
        for match in FENCE.finditer(text):
            lang, info = match.group(1), match.group(2).strip()
            if opening and lang and (lang not in ("python", "bash", "text", "json", "yaml", "promql")
                                     or (info and info not in MARKERS)):
                unknown.append(f"{path.name}: ```{lang} {info}".rstrip())
            opening = not opening
    assert not unknown, "unknown fences (use ```python, ```bash, or add gpu/server):\n" + "\n".join(unknown)


def test_the_docs_have_blocks_that_run() -> None:
    assert sum(len(blocks(p, lang)) for p in DOCS for lang in RUN_HERE) >= 10


# -- the command line ------------------------------------------------------------------------
SYNOPSIS = re.compile(r"`nbgpu (\w+)((?: [^`]*)?)`")
FLAG = re.compile(r"(?<![\w-])(-{1,2}[a-z][a-z0-9-]*)")


def documented_synopses() -> dict[str, set[str]]:
    """Sub-command -> the flags its synopsis in the docs names (every ```nbgpu CMD [...]``` span)."""
    found: dict[str, set[str]] = {}
    for path in DOCS:
        for match in SYNOPSIS.finditer(path.read_text(encoding="utf-8")):
            if "[" in match.group(2) or match.group(2).strip() == "":
                found.setdefault(match.group(1), set()).update(FLAG.findall(match.group(2)))
    return found


def _subparsers():
    from nbgpu.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, type(parser._subparsers._group_actions[0])))
    return action.choices


@pytest.mark.parametrize("command", sorted(_subparsers()))
def test_documented_options_are_the_parsers(command: str) -> None:
    synopses = documented_synopses()
    assert command in synopses, f"no synopsis `nbgpu {command} [...]` in README.md or docs/"
    documented = synopses[command]
    actions = [a for a in _subparsers()[command]._actions
               if a.option_strings and "--help" not in a.option_strings]
    undocumented = [a.option_strings[-1] for a in actions if not documented & set(a.option_strings)]
    known = {flag for a in actions for flag in a.option_strings}
    assert not undocumented, f"nbgpu {command}: options missing from the docs' synopsis: {undocumented}"
    extra = sorted(documented - known)
    assert not extra, f"nbgpu {command}: the docs name options it lacks: {extra}"


# -- the README is for users; contributor material is in CONTRIBUTING.md ---------------------
def _section(text: str, title: str) -> str:
    """The text of the ``## title`` section of a markdown page ("" if absent)."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return m.group(1) if m else ""


README = (ROOT / "README.md").read_text(encoding="utf-8")
JARGON = {
    "a round number": re.compile(r"\bround ?\d+\b|\b(?:eighth|ninth|tenth)\s+round\b", re.I),
    "a results file": re.compile(r"benchmarks/results|\b(?:cpu|nvidia-h200)-\d{4}-\d\d-\d\d"),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),
    "internal words": re.compile(r"IOPub|the final code|one-GPU machines were lent|"
                                 r"still reads as before|two runs of three"),
}


def user_pages() -> dict[str, str]:
    """The pages a user reads, as they read them: README without its Performance section (the
    measurements, which cite their results files), every guide but docs/performance.md."""
    pages = {"README.md": README.replace(_section(README, "Performance"), "")}
    pages.update({p.name: p.read_text(encoding="utf-8") for p in DOCS[1:] if p.name != "performance.md"})
    return pages


@pytest.mark.parametrize("what", sorted(JARGON))
def test_user_pages_carry_no_internal_jargon(what: str) -> None:
    found = [f"{name}: {m.group(0)!r}" for name, text in user_pages().items()
             for m in JARGON[what].finditer(text)]
    assert not found, f"{what} in user pages:\n" + "\n".join(found)


def test_readme_first_screen_says_what_it_is_how_to_install_and_start() -> None:
    first = "\n".join(README.splitlines()[:45])
    assert "Jupyter" in first and "NVIDIA GPU" in first
    assert re.search(r'pip install "[^"]*nbgpu\[[a-z,]+\]', first), "no pip install with extras"
    assert "%load_ext nbgpu" in first and "%gpumon" in first
    assert "--source sim" in first  # how to start without a GPU
    extras = re.findall(r'nbgpu\[([a-z,]+)\]', first)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for extra in ",".join(extras).split(","):
        assert re.search(rf"^{extra} = \[", pyproject, re.M), f"extra [{extra}] is not in pyproject.toml"


def test_quick_start_keeps_two_commands_demo_and_tests() -> None:
    quick = _section(README, "Quick start")
    commands = [line.split("#")[0].strip() for block in re.findall(r"```bash[^\n]*\n(.*?)```", quick, re.S)
                for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"], commands
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_contributor_material_is_in_contributing() -> None:
    contributing = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    for heading in ("Tests", "Layout"):
        assert not _section(README, heading), f"README still has a {heading} section"
        assert _section(contributing, heading), f"CONTRIBUTING.md has no {heading} section"
    assert "tests/test_docs.py" in contributing and "CONTRIBUTING.md" in README
