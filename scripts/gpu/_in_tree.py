"""Run Python code against one source tree in a fresh interpreter; its last output line is JSON.

The two-tree scripts here (``*_ab.py``) measure each tree with that tree's own ``nbgpu`` and
``benchmarks`` (the tree first on the path, the tree as the working folder).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path


def run_json(tree: Path, code: str, *args: object) -> dict:
    """``python -c code args...`` with ``tree`` first on the path; the JSON of its last line."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], cwd=tree, env=env,
                          capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def tree_parser(description: str, how_many: str, rounds: int) -> argparse.ArgumentParser:
    """The two-tree scripts' arguments: ``--out``, ``--tree name=path`` (``how_many``), ``--rounds``."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tree", action="append", required=True, help=f"name=path, {how_many}")
    ap.add_argument("--rounds", type=int, default=rounds)
    return ap


def trees_of(args: argparse.Namespace) -> dict[str, Path]:
    """``--tree name=path`` arguments as {name: resolved path}, in the order given."""
    return {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)}
