"""Where the sampler thread's CPU goes at defaults: its steps profiled inside the thread.

Runs ``nbgpu.Sampler()`` (defaults: diagnostics and host reads on) for ``--seconds``, with
every step after the first run under cProfile in the sampler thread, and writes the thread's
CPU per second (profiled, so somewhat over-stated), the top functions by own and by
cumulative time, and the CPU per call of each NVML function and of each drain.

    python scripts/gpu/sampler_profile.py --out profile.json [--source nvml] [--seconds 31]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--source", default="nvml")
    ap.add_argument("--seconds", type=float, default=31.0)
    ap.add_argument("--interval", type=float, default=None)
    args = ap.parse_args()
    import nbgpu

    kwargs = {} if args.interval is None else {"interval": args.interval}
    s = nbgpu.Sampler(args.source, **kwargs)
    prof = cProfile.Profile()
    original = s.step
    state = {"steps": 0, "cpu_s": 0.0, "first": None}

    def step(now: float) -> None:
        if state["steps"] == 0:  # the first tick reads everything once: not steady state
            original(now)
            state["steps"] = 1
            state["first"] = time.perf_counter()
            return
        c0 = time.thread_time()
        prof.enable()
        try:
            original(now)
        finally:
            prof.disable()
            state["cpu_s"] += time.thread_time() - c0
            state["steps"] += 1

    s.step = step
    s.start()
    time.sleep(args.seconds)
    s.stop()
    wall = time.perf_counter() - (state["first"] or time.perf_counter())
    out: dict = {"command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
                 "source": s.status().source_description, "interval_s": s.interval,
                 "steps": state["steps"], "wall_s": wall,
                 "thread_cpu_ms_per_s_profiled": 1000 * state["cpu_s"] / wall if wall else None}
    stats = pstats.Stats(prof)
    rows = []
    for (path, line, name), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():
        where = f"{Path(path).name}:{line}({name})" if line else name
        rows.append({"function": where, "calls_per_s": calls / wall,
                     "own_ms_per_s": 1000 * tottime / wall, "cum_ms_per_s": 1000 * cumtime / wall})
    out["by_own_time"] = sorted(rows, key=lambda r: -r["own_ms_per_s"])[:40]
    out["by_cumulative_time"] = sorted(rows, key=lambda r: -r["cum_ms_per_s"])[:60]
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(50)
    args.out.write_text(json.dumps(out, indent=1))
    args.out.with_suffix(".txt").write_text(text.getvalue())
    print(json.dumps({k: out[k] for k in ("source", "steps", "wall_s", "thread_cpu_ms_per_s_profiled")}))
    for r in out["by_cumulative_time"][:30]:
        print(f"{r['cum_ms_per_s']:8.3f} {r['own_ms_per_s']:8.3f} {r['calls_per_s']:8.2f}/s  {r['function']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
