"""Where the sampler thread's CPU goes at defaults, part by part, without a profiler.

Runs ``nbgpu.Sampler()`` (defaults: diagnostics and host reads on) for ``--seconds`` with its
thread as it runs in a notebook, and counts the thread's CPU (``time.thread_time``) inside
each part of a step: NVML calls (``NVMLGateway.call``), the host reads, the store's appends,
the diagnostics (their context and each rule), and the whole step. What is left of a step
once the parts are taken off is the read loop's own Python. A profiler runs cold code
several times slower than it runs; two clock reads a part do not.

    python scripts/gpu/sampler_sections.py --out sections.json [--source nvml] [--seconds 31]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


PARTS = ("nvml calls", "host reads", "store appends", "diagnostics")  # none nests in another


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--source", default="nvml")
    ap.add_argument("--seconds", type=float, default=31.0)
    ap.add_argument("--watched", action="store_true", help="a listener calls watch() every step, "
                    "as an open panel keeps the sampler watched")
    args = ap.parse_args()

    import nbgpu
    from benchmarks.threadcpu import SectionTimers
    from nbgpu.diagnostics import engine
    from nbgpu.sources.host import HostSource
    from nbgpu.sources.nvml_gateway import NVMLGateway
    from nbgpu.store import Store

    sections = SectionTimers()
    sections.wrap(NVMLGateway, "call", "nvml calls")
    by_function = SectionTimers()  # the same calls again, one section a function
    by_function.wrap(NVMLGateway, "call", lambda gateway, function, *args: f"nvml: {function}")
    sections.wrap(HostSource, "read", "host reads")
    sections.wrap(Store, "append_many", "store appends")
    sections.wrap(Store, "append_row", "store appends")  # a tick's reads
    sections.wrap(engine.DiagnosticsEngine, "evaluate", "diagnostics")
    sections.wrap(engine.DiagnosticsEngine, "context", "diagnostics: context")
    for rule in list(engine.RULE_FUNCTIONS):
        sections.wrap(engine.RULE_FUNCTIONS, rule, f"diagnostics: {rule}")

    s = nbgpu.Sampler(args.source)
    if args.watched:
        s.add_listener(lambda sampler, now: sampler.watch())
    sections.wrap(s, "step", "step")
    s.start()
    time.sleep(2.5)  # the first tick reads everything once: not the steady state
    sections.reset()
    by_function.reset()
    t0 = time.perf_counter()
    time.sleep(args.seconds)
    wall_s = time.perf_counter() - t0
    cpu = {k: ns / 1e9 for k, ns in (sections.cpu_ns + by_function.cpu_ns).items()}
    calls = dict(sections.calls + by_function.calls)
    s.stop()
    by_function.undo()
    sections.undo()

    step = cpu.get("step", 0.0)
    parts = {k: v for k, v in cpu.items() if k in PARTS}
    rest = step - sum(parts.values())
    out = {"command": " ".join(["python", *sys.argv]), "source": s.status().source_description,
           "watched": args.watched,
           "seconds": wall_s, "steps": calls.get("step", 0),
           "ms_per_s": {k: 1000 * v / wall_s for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])},
           "calls_per_s": {k: v / wall_s for k, v in calls.items()},
           "read loop's own Python, ms_per_s": 1000 * rest / wall_s}
    args.out.write_text(json.dumps(out, indent=1))
    for k, v in out["ms_per_s"].items():
        print(f"{v:8.3f} ms/s  {out['calls_per_s'][k]:7.2f}/s  {k}")
    print(f"{1000 * rest / wall_s:8.3f} ms/s  the read loop's own Python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
