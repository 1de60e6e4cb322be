"""nbgpu's own Python per sampler step on two source trees, in short alternated blocks.

One worker process per tree holds a sampler for each arm of
``benchmarks.sampler_cost.python_per_step`` (this checkout's copy, run against that tree's
``nbgpu``): defaults, no diagnostics, no host reads, neither, and defaults after an hour
of steps. Blocks of ``--steps`` steps then run tree after tree (ABBA within a round), so a
machine that slows down for seconds slows both trees' blocks of a round alike: each round
gives a paired ratio (second tree over first), and the figure is the median ratio with a
distribution-free 95 % interval, beside each tree's median ms per step.

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
# A worker: this checkout's benchmark module, loaded under another package name so that
# ``nbgpu`` comes from the tree under test (first on the path), not from this checkout.
WORKER = """
import importlib, json, sys, types
pkg = types.ModuleType("bench_here"); pkg.__path__ = [sys.argv[1]]; sys.modules["bench_here"] = pkg
cost = importlib.import_module("bench_here.sampler_cost")
arms = cost.stepped_arms()
steppers = {a: cost.SteppedSampler(kw, warmup, marks) for a, (kw, warmup, marks) in arms.items()}
print(json.dumps(list(arms)), flush=True)
for line in sys.stdin:
    arm, steps = json.loads(line)
    print(json.dumps(steppers[arm].python_ms_per_step(steps)), flush=True)
for s in steppers.values():
    s.close()
"""


class Worker:
    """A process with one tree's nbgpu, answering "run ``steps`` steps of ``arm``" requests."""

    def __init__(self, tree: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(tree))
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, str(HERE / "benchmarks")],
                                     cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        self.arms = json.loads(self.proc.stdout.readline())

    def run(self, arm: str, steps: int) -> float:
        self.proc.stdin.write(json.dumps([arm, steps]) + "\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline()))

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--tree", action="append", required=True, help="name=path, exactly two")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--steps", type=int, default=60, help="steps per block")
    args = ap.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)}
    if len(trees) != 2:
        ap.error("give exactly two trees")
    sys.path.insert(0, str(HERE))
    from benchmarks.env import host_info
    from benchmarks.stats import median_interval

    (first, a_tree), (second, b_tree) = trees.items()
    workers = {first: Worker(a_tree), second: Worker(b_tree)}
    arms = workers[first].arms
    blocks: dict[str, dict[str, list[float]]] = {arm: {first: [], second: []} for arm in arms}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        for r in range(args.rounds):
            order = (first, second, second, first) if r % 2 == 0 else (second, first, first, second)
            for arm in arms:
                got = {first: [], second: []}
                for name in order:
                    got[name].append(workers[name].run(arm, args.steps))
                for name in (first, second):
                    blocks[arm][name].append(statistics.fmean(got[name]))
    finally:
        for w in workers.values():
            w.close()
    summary = {}
    for arm in arms:
        ratios = [b / a for a, b in zip(blocks[arm][first], blocks[arm][second], strict=True)]
        lo, hi = median_interval(ratios)
        summary[arm] = {f"{first}_ms_per_step_median": statistics.median(blocks[arm][first]),
                        f"{second}_ms_per_step_median": statistics.median(blocks[arm][second]),
                        "ratio_median": statistics.median(ratios), "ratio_95": [lo, hi]}
    doc = {"command": " ".join(["python", *sys.argv]), "host": host_info(), "started_utc": started,
           "trees": {name: str(tree) for name, tree in trees.items()},
           "setup": "1 simulated GPU, interval 1 s, one step per fake second; CPU of the stepping "
                    "thread less the time inside the NVML stand-in's calls; per round and arm "
                    "the trees' blocks run ABBA (BAAB the next round), each tree's mean of its "
                    "two; each arm's sampler keeps stepping from block to block (its fake clock "
                    "runs on)",
           "rounds": args.rounds, "steps_per_block": args.steps, "summary": summary, "blocks": blocks}
    args.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
