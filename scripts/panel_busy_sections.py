"""Where a live panel's refresh goes while the main thread works: its thread's CPU, step by step.

A panel over one simulated GPU (the interference benchmark's panel arm: a window of history,
its sampler backdated, messages sent as a kernel sends them where ipykernel is installed)
updates from its own timer for ``--seconds`` while the main thread runs small numpy work
without pause, or sleeps (``--idle``). Each step of the refresh is timed with a thread-CPU
timer (``scripts/panel_refresh_sections.py``'s steps; steps nest); the first seconds, with
the first full draw, are left out. The refresh then runs once a second, cold, as beside a
training loop, not back to back as ``panel_refresh`` runs it.

    python scripts/panel_busy_sections.py --out busy.json [--idle] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETTLE_S = 3.0  # the first draw and the timer's first ticks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--idle", action="store_true", help="the main thread sleeps instead")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "scripts"))
    import importlib.util

    import numpy as np
    import panel_refresh_sections as sections

    import nbgpu
    from benchmarks.panel_driver import backdate, find_panel, prefill

    timers = sections._wrap()
    spent, calls = timers.cpu_ns, timers.calls
    api = find_panel()
    if not api.available:
        print(api.reason)
        return 1
    history_s = api.default_window_s() + 5.0
    sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=1, seed=0))
    prefill(sampler, history_s)
    sampler.start()
    backdate(sampler, history_s)
    kernel_like = all(importlib.util.find_spec(m) is not None for m in ("ipykernel", "jupyter_client"))
    run = api.drive(sampler, kernel_like=kernel_like)
    a = np.full(64, 0.5)
    t0 = time.perf_counter()
    settled = False
    try:
        while time.perf_counter() - t0 < SETTLE_S + args.seconds:
            if not settled and time.perf_counter() - t0 >= SETTLE_S:
                timers.reset()
                settled = True
            if args.idle:
                time.sleep(0.001)
            else:
                for _ in range(256):
                    a = a * 0.999 + 0.0005
    finally:
        facts = run.stop()
        sampler.stop()
    refreshes = calls["refresh, all of it"]
    steps = {name: {"us_per_refresh": spent[name] / 1e3 / max(refreshes, 1),
                    "calls_per_refresh": calls[name] / max(refreshes, 1)}
             for _, _, _, name in sections.STEPS}
    out = {"command": "python scripts/panel_busy_sections.py " + " ".join(sys.argv[1:]),
           "device": f"CPU only, {os.cpu_count()} cores (one simulated GPU)",
           "machine": platform.machine(), "python": platform.python_version(),
           "main_thread": "idle" if args.idle else "busy (small numpy work)",
           "comm": facts.get("comm"), "refreshes_timed": refreshes, "panel": facts, "steps": steps}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for name, step in steps.items():
        print(f"{name:36s} {step['us_per_refresh']:8.1f} us  ({step['calls_per_refresh']:.2f} calls)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
