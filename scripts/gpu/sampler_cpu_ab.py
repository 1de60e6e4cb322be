"""The sampler thread's CPU at defaults on real GPU 0 for two source trees, alternated in one run.

Each block is one 31 s run of a tree's own ``benchmarks.sampler_cost._run`` (defaults, nobody
watching) in a fresh interpreter; trees alternate A B B A for ``--rounds`` rounds, so a
machine whose speed drifts over the run weighs on both alike. Last, one breakdown run per
tree (``_breakdown``: NVML calls against nbgpu's own Python), with this checkout's
``benchmarks`` measuring each tree's ``nbgpu``, so both splits are counted the same way.

    python3 scripts/gpu/sampler_cpu_ab.py --out ab.json --tree before=/path/a --tree after=/path/b
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from _in_tree import run_json, tree_parser, trees_of

RUN = ("import json, types; from benchmarks import sampler_cost as c; "
       "ctx = types.SimpleNamespace(quick=False); "
       "print(json.dumps(c._run(ctx, 'nvml', [0], 'defaults')[0]))")
HERE = Path(__file__).resolve().parents[2]  # this checkout: its benchmarks, the tree's nbgpu
BREAKDOWN = ("import json, sys, types; here = sys.argv[1]; sys.path.insert(0, here); "
             "from benchmarks import sampler_cost as c; "
             "sys.path[:] = [p for p in sys.path if p != here]; import nbgpu; "
             "assert nbgpu.__file__.startswith(sys.argv[2] + '/'), nbgpu.__file__; "
             "ctx = types.SimpleNamespace(quick=False); "
             "s = c._breakdown(ctx, [0]); s.pop('run'); print(json.dumps(s))")


def main() -> int:
    args = tree_parser(__doc__.splitlines()[0], "exactly two", rounds=1).parse_args()
    trees = trees_of(args)
    (a, _), (b, _) = trees.items()
    runs: dict[str, list[dict]] = {a: [], b: []}
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for _ in range(args.rounds):
        for name in (a, b, b, a):
            runs[name].append(run_json(trees[name], RUN))
    split = {name: run_json(tree, BREAKDOWN, HERE, tree) for name, tree in trees.items()}
    summary = {name: {"cpu_ms_per_s_each": [round(1000 * r["cpu_s_per_s"], 3) for r in rs],
                      "cpu_ms_per_s_mean": 1000 * statistics.fmean(r["cpu_s_per_s"] for r in rs),
                      "breakdown_nvml_ms_per_s": split[name]["nvml_cpu_ms_per_s"],
                      "breakdown_python_ms_per_s": split[name]["python_cpu_ms_per_s"],
                      "breakdown_thread_ms_per_s": split[name]["thread_cpu_ms_per_s"]}
               for name, rs in runs.items()}
    doc = {"command": " ".join(["python3", *sys.argv]), "started_utc": started,
           "trees": {name: str(tree) for name, tree in trees.items()}, "order": "A B B A per round",
           "summary": summary, "runs": runs, "breakdown": split}
    args.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
