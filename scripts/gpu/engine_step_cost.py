"""What one sampler step costs on real GPUs, how fast the fast-memory lane runs, how soon stop() returns.

Drives ``Sampler.step(now)`` by hand on NVML (CPU time per step for a tick, a drain-only
wake-up and a fast-memory read), then runs the thread for a few seconds with
``fast_memory(0.01)`` held and reports the achieved memory-read spacing and the thread's
CPU share, and finally times ``stop()``. ``--source sim`` runs the same on simulated GPUs.

    python scripts/gpu/engine_step_cost.py --out engine-step.json [--source nvml] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def per_step_us(s, reads_now, repeats: int) -> dict:
    """Median and p90 CPU µs (thread time) of ``repeats`` steps, each at ``reads_now()``."""
    cpu = []
    for _ in range(repeats):
        now = reads_now()
        c0 = time.thread_time()
        s.step(now)
        cpu.append(1e6 * (time.thread_time() - c0))
    cpu.sort()
    return {"cpu_us_median": statistics.median(cpu), "cpu_us_p90": cpu[int(0.9 * (len(cpu) - 1))],
            "steps": repeats}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--source", default="nvml")
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()
    import numpy as np

    import nbgpu

    out: dict = {"command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]), "figures": {}}
    fig = out["figures"]
    s = nbgpu.Sampler(args.source, interval=0.5, host=False, diagnostics=False)
    st = s.status()
    out["device"] = ", ".join(sorted({str(d["name"]) for d in s.devices}))
    out["driver"] = st.source_description
    out["gpus"] = len(s.devices)
    t = [time.time()]

    def later(dt: float):
        def now() -> float:
            t[0] = max(time.time(), t[0] + dt)
            return t[0]
        return now

    s.step(later(0)())
    fig["step_tick"] = per_step_us(s, later(0.5), 50)  # every call a full tick
    fig["step_drain_only"] = per_step_us(s, later(0.0), 50)  # between ticks: buffers only
    with s.fast_memory(0.01):
        fig["step_fast_memory"] = per_step_us(s, later(0.01), 200)
    s.stop(close=False)

    s2 = nbgpu.Sampler(args.source, interval=0.5, host=False, diagnostics=False).start()
    time.sleep(1.0)
    c0 = time.process_time()
    t0 = time.time()
    with s2.fast_memory(0.01):
        time.sleep(args.seconds)
    t1 = time.time()
    cpu_s = time.process_time() - c0
    key = s2.devices[0]["index"]
    tm, _ = s2.store.series(key, "mem_used_bytes", t0 + 0.1, t1 - 0.1)
    gaps = np.diff(tm) if len(tm) > 1 else np.array([np.nan])
    fig["fast_memory_thread"] = {"seconds": t1 - t0, "reads": len(tm),
                                 "gap_ms_median": float(np.median(gaps) * 1e3),
                                 "gap_ms_p99": float(np.percentile(gaps, 99) * 1e3),
                                 "gap_ms_max": float(np.max(gaps) * 1e3),
                                 "process_cpu_pct": 100.0 * cpu_s / (t1 - t0)}
    w0 = time.perf_counter()
    s2.stop()
    fig["stop_ms"] = 1e3 * (time.perf_counter() - w0)
    fig["state_after_stop"] = s2.status().state
    s.stop()
    text = json.dumps(out, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
