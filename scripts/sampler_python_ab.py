"""nbgpu's own Python per sampler step on two or more source trees, alternated in one run.

Runs ``benchmarks.sampler_cost.python_per_step`` (this checkout's copy) against each tree's
``nbgpu`` in a fresh interpreter, tree after tree, for ``--rounds`` rounds, and writes the
per-arm medians (defaults, no diagnostics, no host reads, neither) of each tree: a change
is judged by trees measured side by side on one machine, not by runs on different days.

    python scripts/sampler_python_ab.py --out ab.json --tree before=/path/a --tree after=/path/b
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
# This checkout's benchmark module, loaded under another package name so that ``nbgpu``
# comes from the tree under test (first on the path) and not from this checkout.
MEASURE = """
import importlib, json, sys, types
pkg = types.ModuleType("bench_here"); pkg.__path__ = [sys.argv[1]]; sys.modules["bench_here"] = pkg
cost = importlib.import_module("bench_here.sampler_cost")
out = {arm: cost.python_per_step(kw, int(sys.argv[2])) for arm, kw in cost.PYTHON_ARMS.items()}
name, kw, warmup = cost.LONG_HISTORY_ARM
out[name] = cost.python_per_step(kw, int(sys.argv[2]), warmup=warmup)
print(json.dumps(out))
"""


def measure(tree: Path, steps: int) -> dict:
    """One run of every arm with ``tree``'s nbgpu, in a fresh interpreter."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run([sys.executable, "-c", MEASURE, str(HERE / "benchmarks"), str(steps)],
                          cwd=tree, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tree", action="append", required=True, help="name=path, at least two")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)}
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(measure(tree, args.steps))
    medians = {name: {arm: statistics.median(r[arm]["python_ms_per_step"] for r in rs)
                      for arm in rs[0]} for name, rs in runs.items()}
    # Noise on a shared machine only adds CPU time, so the least run is the steadiest figure.
    least = {name: {arm: min(r[arm]["python_ms_per_step"] for r in rs) for arm in rs[0]}
             for name, rs in runs.items()}
    sys.path.insert(0, str(HERE))
    from benchmarks.env import host_info

    doc = {"command": " ".join(["python", *sys.argv]), "host": host_info(),
           "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "trees": {name: str(tree) for name, tree in trees.items()},
           "setup": "1 simulated GPU, interval 1 s, one step per fake second; CPU of the stepping "
                    "thread less the time inside the NVML stand-in's calls",
           "rounds": args.rounds, "steps_per_run": args.steps,
           "python_ms_per_step_median": medians, "python_ms_per_step_least": least, "runs": runs}
    args.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps({"median": medians, "least": least}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
