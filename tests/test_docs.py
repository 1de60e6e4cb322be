"""Docs that cannot drift: every Python and shell block of README.md and docs/ runs, on
simulated GPUs, and the documented command-line options are the parser's.

Blocks are found with mktestdocs. A block's fence says where it runs:

- `` ```python `` and `` ```bash `` run here, in CI, with no GPU. Python blocks of one file
  run in order in one in-process IPython shell (so ``%gpumon`` lines run too) and share
  its namespace, as cells of a notebook where ``import nbgpu`` and ``%load_ext nbgpu``
  ran first; shell blocks run with ``bash -e``. Both run in a fresh temporary folder,
  so files they write land there. ``train()``, ``train_one_epoch()`` and ``model.fit()``
  stand for the reader's own code: a few milliseconds of work.
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
MARKERS = ("gpu", "server")
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


STAND_INS = '''
import time as _time

def train(seconds=0.05):
    """Stands for the reader's training code: a little work."""
    end = _time.perf_counter() + seconds
    while _time.perf_counter() < end:
        sum(range(1000))

train_one_epoch = train

class _Model:
    def fit(self, *args, **kwargs):
        train()

model = _Model()
'''


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """An in-process IPython shell in a fresh folder, its namespace holding the stand-ins."""
    from IPython.core.interactiveshell import InteractiveShell

    from nbgpu import session
    from nbgpu.widgets import registry

    monkeypatch.chdir(tmp_path)
    sh = InteractiveShell.instance()
    sh.reset(new_session=False)
    sh.run_cell(STAND_INS).raise_error()
    sh.run_cell("import nbgpu\n%load_ext nbgpu", silent=True).raise_error()
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


def _run_python(sh, path: Path, code: list[str]) -> None:
    for i, block in enumerate(code):
        result = sh.run_cell(block, silent=True)
        if not result.success:
            err = result.error_in_exec or result.error_before_exec
            raise AssertionError(f"{path.name}, python block {i + 1} failed: {err!r}\n{block}") from err


def _commands(folder: Path) -> Path:
    """``nbgpu`` and ``python`` for the blocks: this interpreter's, also where nbgpu is not installed."""
    folder.mkdir(exist_ok=True)
    for name, line in (("nbgpu", f'exec "{sys.executable}" -m nbgpu.cli "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"')):
        script = folder / name
        script.write_text(f"#!/bin/sh\n{line}\n")
        script.chmod(0o755)
    return folder


def _run_bash(path: Path, code: list[str], cwd: Path) -> None:
    bin_dir = _commands(cwd / ".bin")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
               PYTHONPATH=str(ROOT), NBGPU_DOCS_ROOT=str(ROOT))
    for i, block in enumerate(code):
        done = subprocess.run(["bash", "-e", "-u", "-c", block], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=180)
        assert done.returncode == 0, (f"{path.name}, bash block {i + 1} exited {done.returncode}:\n"
                                      f"{block}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_python_blocks_run_on_simulated_gpus(path: Path, shell) -> None:
    _run_python(shell, path, blocks(path, "python"))


@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_bash_blocks_run(path: Path, tmp_path) -> None:
    _run_bash(path, blocks(path, "bash"), tmp_path)


@pytest.mark.gpu
@pytest.mark.parametrize("path", DOCS, ids=[p.name for p in DOCS])
def test_gpu_blocks_run_where_there_is_a_gpu(path: Path, shell, tmp_path) -> None:
    py, sh = blocks(path, "python gpu"), blocks(path, "bash gpu")
    if not (py or sh):
        return
    if not _gpu_present():
        pytest.skip("needs an NVIDIA GPU (NVML found none)")
    _run_python(shell, path, py)
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
