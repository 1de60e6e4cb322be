"""The panel refresh benchmark on two source trees, alternated in one run on one machine.

A machine's speed drifts between runs (the same code read 2.03 and 2.15 ms on two runs of
the H200 host), so a change is judged by trees measured side by side: each round runs
``benchmarks.cpu_widgets.refresh_cost`` once per tree, in a fresh interpreter, in turn.

    python scripts/gpu/panel_refresh_ab.py --out ab.json --tree before=/path/a --tree after=/path/b

``--history S`` measures instead a panel over a sampler started ``S`` seconds before the
first refresh, 15 min window (its span still grows while ``S`` is shorter), with this
checkout's ``refresh_cost`` run against each tree's ``nbgpu`` (a tree's own benchmark may
not know that case).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from _in_tree import run_json, tree_parser, trees_of

MEASURE = ("import json, sys; from benchmarks.cpu_widgets import refresh_cost; "
           "print(json.dumps(refresh_cost(float(sys.argv[1]), int(sys.argv[2]))))")
# This checkout's benchmarks under another package name, so ``nbgpu`` is the tree's.
MEASURE_HERE = ("import importlib, json, sys, types; "
                "pkg = types.ModuleType('bench_here'); pkg.__path__ = [sys.argv[3]]; "
                "sys.modules['bench_here'] = pkg; cw = importlib.import_module('bench_here.cpu_widgets'); "
                "import nbgpu; assert not nbgpu.__file__.startswith(sys.argv[3]); "
                "print(json.dumps(cw.refresh_cost(float(sys.argv[1]), int(sys.argv[2]), "
                "history_s=float(sys.argv[4]))))")
HERE = Path(__file__).resolve().parents[2]


def main() -> int:
    ap = tree_parser(__doc__.splitlines()[0], "at least two", rounds=4)
    ap.add_argument("--refreshes", type=int, default=60)
    ap.add_argument("--history", type=float, default=None,
                    help="seconds the sampler ran before the first refresh (15 min window)")
    args = ap.parse_args()
    trees = trees_of(args)
    windows = ("60", "900") if args.history is None else ("900",)
    runs: dict[str, dict[str, list]] = {name: {w: [] for w in windows} for name in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))  # ABBA: drift cancels
        for name in order:
            for window in windows:
                if args.history is None:
                    got = run_json(trees[name], MEASURE, float(window), args.refreshes)
                else:
                    got = run_json(trees[name], MEASURE_HERE, float(window), args.refreshes,
                                   HERE / "benchmarks", args.history)
                runs[name][window].append({k: got[k] for k in ("cpu_ms_mean", "cpu_ms_median",
                                                               "messages_per_refresh", "bytes_per_refresh")})
                print(f"round {r} {name:8s} {window:>3s} s: mean {got['cpu_ms_mean']:.3f} ms, "
                      f"median {got['cpu_ms_median']:.3f} ms", flush=True)
    summary = {name: {window: {"mean_of_means_ms": statistics.fmean(x["cpu_ms_mean"] for x in rows),
                               "median_of_medians_ms": statistics.median(x["cpu_ms_median"] for x in rows)}
                      for window, rows in by_window.items()} for name, by_window in runs.items()}
    first, *others = list(trees)
    ratios = {f"{o}/{first}": {w: summary[o][w]["mean_of_means_ms"] / summary[first][w]["mean_of_means_ms"]
                               for w in windows} for o in others}
    device = driver = None
    try:
        import pynvml

        pynvml.nvmlInit()
        device = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(0))
        driver = pynvml.nvmlSystemGetDriverVersion()
        pynvml.nvmlShutdown()
    except Exception:  # a CPU machine: the figures still compare the trees
        pass
    args.out.write_text(json.dumps({
        "command": "python3 scripts/gpu/panel_refresh_ab.py " + " ".join(sys.argv[1:]),
        "device": device, "driver": driver, "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "trees": {name: str(path) for name, path in trees.items()}, "rounds": args.rounds,
        "refreshes_per_run": args.refreshes, "history_s": args.history,
        "summary": summary, "ratios_of_means": ratios, "runs": runs}, indent=1))
    print(json.dumps({"summary": summary, "ratios_of_means": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
