"""Where one panel refresh's CPU goes: the refreshing thread's CPU in each step of it.

Runs ``benchmarks.cpu_widgets.refresh_cost`` (8 simulated GPUs, interval 0.1 s, a full
window) with each step of the refresh wrapped in a thread-CPU timer, no profiler, so the
steps keep their own cost (a wrapper adds well under a microsecond a call). With
``--kernel-like`` the widgets' messages go out as a kernel sends them
(``benchmarks.comm_recorder.KernelLikeComms``: a session signs each, ipykernel's IOPub
thread sends it); else to the recording comm. Steps nest: "store read + buckets" is inside
"lines", for example.

    python scripts/panel_refresh_sections.py --out sections.json [--kernel-like] [--refreshes 100]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (module, owner, attribute, step name): the refresh's steps, outermost first.
STEPS = (
    ("nbgpu.widgets.monitor", "GPUMonitor", "refresh", "refresh, all of it"),
    ("nbgpu.widgets.monitor", "GPUMonitor", "_packed", "lines: points, scales, pixels"),
    ("nbgpu.widgets.monitor", "GPUMonitor", "_points", "store read + buckets + points"),
    ("nbgpu.store", "Store", "series_rows", "store read of the new rows"),
    ("nbgpu.widgets.spark", "SparkSet", "add_rows", "new rows into their buckets"),
    ("nbgpu.widgets.spark", "SparkSet", "points", "buckets to line points"),
    ("nbgpu.widgets.monitor", None, "pad_rows", "points to the mark's rows"),
    ("nbgpu.sampler", "Sampler", "latest", "newest readings and their states"),
    ("nbgpu.widgets.monitor", None, "value_texts", "value texts"),
    ("nbgpu.widgets.text", None, "grid_html", "the texts' HTML"),
    ("nbgpu.widgets.monitor", None, "send_values", "sending the texts"),
    ("nbgpu.widgets.monitor", None, "send_xy", "sending the lines"),
    ("nbgpu.widgets.processes", "ProcessesLine", "refresh", "processes line"),
    ("nbgpu.widgets.monitor", "GPUMonitor", "_active_alerts", "active alerts"),
    ("nbgpu.sampler", "Sampler", "status", "sampler status"),
    ("nbgpu.widgets.monitor", "GPUMonitor", "_draw_header", "header"),
)


def _wrap():
    """A ``SectionTimers`` with a thread-CPU timer around every step of ``STEPS``."""
    import importlib

    from benchmarks.threadcpu import SectionTimers

    timers = SectionTimers()
    for module, owner, attr, name in STEPS:
        where = importlib.import_module(module)
        timers.wrap(where if owner is None else getattr(where, owner), attr, name)
    return timers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--refreshes", type=int, default=100)
    ap.add_argument("--window", type=float, default=60.0)
    ap.add_argument("--kernel-like", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from benchmarks import cpu_widgets
    from benchmarks.comm_recorder import KernelLikeComms

    comms = KernelLikeComms().start() if args.kernel_like else None
    timers = _wrap()
    spent, calls = timers.cpu_ns, timers.calls
    try:
        got = cpu_widgets.refresh_cost(args.window, args.refreshes,
                                       comm="kernel" if comms is not None else "recording")
    finally:
        if comms is not None:
            comms.stop()
    refreshes = calls["refresh, all of it"]  # the first, full draw included
    steps = {name: {"us_per_refresh": spent[name] / 1e3 / refreshes,
                    "calls_per_refresh": calls[name] / refreshes}
             for _, _, _, name in STEPS}
    out = {"command": "python scripts/panel_refresh_sections.py " + " ".join(sys.argv[1:]),
           "device": f"CPU only, {os.cpu_count()} cores", "machine": platform.machine(),
           "python": platform.python_version(), "comm": "kernel-like" if comms else "recording",
           "window_s": args.window, "refreshes_timed": refreshes,
           "refresh_cost": {k: got[k] for k in ("cpu_ms_mean", "cpu_ms_median",
                                                "messages_per_refresh", "bytes_per_refresh")},
           "steps": steps}
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    for name, step in steps.items():
        print(f"{name:36s} {step['us_per_refresh']:8.1f} us  ({step['calls_per_refresh']:.2f} calls)")
    print(f"refresh_cost: mean {got['cpu_ms_mean']:.3f} ms, {got['messages_per_refresh']:.2f} messages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
