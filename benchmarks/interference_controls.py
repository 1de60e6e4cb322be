"""Positive controls for the interference method (``gpu_interference``): threads whose cost to
the loop is known, which the method must recover within ±20 %.

A ``GilHolder`` wakes as few times a second as it can (bursts of at most 2.5 ms: 1 ms/s is
one burst of 1 ms, 10 ms/s four of 2.5 ms) and spins in Python, holding the GIL throughout
(each burst shorter than the interpreter's 5 ms switch interval, so it is never made to
drop it; few bursts, so few hand-overs of the GIL, each of which costs the loop too).
A loop that needs the GIL all the time then loses that time: its
slowdown is ``hold / (1000 - hold) × 100 %`` (1, 3 and 10 ms/s: +0.100, +0.301, +1.010 %),
plus what each hand-over of the GIL costs, which the method counts too (so a small excess
over the expected figure is real, not error). Each runs pinned (the loop on its own CPU)
and unpinned.

Run: ``python -m benchmarks.interference_controls [--gpu] [--seconds S] [--out DIR]``: the
CPU loop (small numpy ops) here, ``--gpu`` the launch-bound loop on GPU 0 (``naive_50hz``,
NVML read at 50 Hz, is measured beside them there, with its threads' CPU as the figure it
is set against). Writes ``interference-controls-<loop>.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

from .gpu_interference import PeriodicControlMonitor, _ci, measure_all
from .kernel_cost import run_facts

HOLDS_MS_PER_S = (1.0, 3.0, 10.0)
MAX_BURST_MS = 2.5
TOLERANCE = 0.20


class GilHolder(PeriodicControlMonitor):
    """Holds the GIL ``hold_ms_per_s`` ms a second, in bursts of at most ``MAX_BURST_MS``."""

    def __init__(self, hold_ms_per_s: float) -> None:
        wakes = max(1, math.ceil(hold_ms_per_s / MAX_BURST_MS - 1e-9))
        super().__init__(1.0 / wakes, name=f"gil_{hold_ms_per_s:g}ms")
        self.burst_s = hold_ms_per_s / 1000.0 / wakes
        self.held_s = 0.0

    def _work(self) -> None:
        t0 = time.perf_counter()
        end = t0 + self.burst_s
        while time.perf_counter() < end:
            pass
        self.held_s += time.perf_counter() - t0

    def stop(self) -> dict:
        facts = super().stop()
        return {**facts, "held_s": self.held_s}


def expected_pct(hold_ms_per_s: float) -> float:
    """The slowdown of a loop that needs the GIL all the time when ``hold`` ms/s are taken."""
    return hold_ms_per_s / (1000.0 - hold_ms_per_s) * 100.0


def run_controls(loop, seconds: float, pinned: bool, extra: dict | None = None) -> dict:
    """Every control on ``loop``, pinned or not: each arm's figure against what it should be."""
    os.environ["NBGPU_BENCH_PIN"] = "1" if pinned else "0"
    factories = {f"gil_{h:g}ms": (lambda h=h: GilHolder(h)) for h in HOLDS_MS_PER_S}
    factories.update(extra or {})
    result = measure_all(loop, factories, list(factories), seconds, 1.0)
    out = {"pinned": result["pinned"], "skipped": result["skipped"], "controls": {}}
    for name, arm in result["arms"].items():
        row = {"slowdown_pct": arm["slowdown_pct"], "ci95_pct": arm["ci95_pct"],
               "threads_cpu_ms_per_s": 1000 * arm["threads_cpu_s_per_s"], "interval": _ci(arm)}
        if name.startswith("gil_"):
            hold = float(name[4:-2])
            want = expected_pct(hold)
            row.update(expected_pct=want, ratio=arm["slowdown_pct"] / want,
                       recovered=abs(arm["slowdown_pct"] / want - 1.0) <= TOLERANCE)
        else:  # NVML at 50 Hz: set against its threads' CPU, an upper bound on the GIL they held
            bound = arm["threads_cpu_s_per_s"] * 1000
            row.update(cpu_bound_pct=expected_pct(bound))
        out["controls"][name] = row
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.interference_controls",
                                description=__doc__.split("\n")[0])
    p.add_argument("--gpu", action="store_true", help="the launch-bound loop on GPU 0, plus NVML at 50 Hz")
    p.add_argument("--seconds", type=float, default=20.0, help="recorded seconds per arm")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    a = p.parse_args(argv)
    if a.gpu:
        from .gpu_loops import LaunchBound
        from .monitors import NaivePollMonitor

        loop, kind = LaunchBound(["cuda:0"]), "launch-bound"
        extra = {"naive_50hz": lambda: NaivePollMonitor(None, [0])}
    else:
        from .gpu_loops import CpuSmallOps

        loop, kind, extra = CpuSmallOps(), "cpu-loop", {}
    got = {"loop": kind, "seconds_per_arm": a.seconds, "tolerance": TOLERANCE,
           "pinned": run_controls(loop, a.seconds, True, extra),
           "unpinned": run_controls(loop, a.seconds, False, extra)}
    got["target"] = f"every GIL control recovered within ±{TOLERANCE:.0%}, pinned and unpinned"
    got["all_recovered"] = all(c.get("recovered", True) for side in ("pinned", "unpinned")
                               for c in got[side]["controls"].values())
    path = Path(a.out) / f"interference-controls-{kind}.json"
    got.update(run_facts('benchmarks.interference_controls', sys.argv[1:] if argv is None else argv))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(got, indent=1))
    for side in ("pinned", "unpinned"):
        for name, c in got[side]["controls"].items():
            want = (f"expected {c['expected_pct']:+.3f} %, ratio {c['ratio']:.2f}, "
                    f"{'recovered' if c['recovered'] else 'NOT recovered'}" if "expected_pct" in c
                    else f"threads' CPU {c['threads_cpu_ms_per_s']:.2f} ms/s")
            print(f"{side:9s} {name:11s} {c['interval']}  {want}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
