"""Every NVML sample-buffer drain a real sampler makes at defaults, by buffer, with its CPU.

A 31 s run of ``nbgpu.Sampler`` on GPU 0, nobody watching, with ``nvmlDeviceGetSamples``
wrapped: each call's time since the start, sampling type (0 power, 1 utilisation, 2 memory
utilisation), thread CPU in µs and thread. Says how often each buffer is drained and what a
drain costs as the sampler makes it (cold, once a second), beside ``nvml_call_costs.py``'s
back-to-back figures. The listener's tick times bound the run's first and last tick.

    python3 scripts/gpu/drain_calls.py out.json
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time

import pynvml

import nbgpu

TYPES = {0: "power", 1: "utilisation", 2: "memory utilisation"}


def main() -> int:
    calls: list[tuple[float, int, int, str]] = []
    original = pynvml.nvmlDeviceGetSamples
    t0 = time.time()

    def timed(handle, kind, since):
        c0, at = time.thread_time(), time.time()
        try:
            return original(handle, kind, since)
        finally:
            calls.append((round(at - t0, 3), kind, round(1e6 * (time.thread_time() - c0)),
                          threading.current_thread().name))

    pynvml.nvmlDeviceGetSamples = timed
    sampler = nbgpu.Sampler(source="nvml", gpus=[0])
    ticks: list[float] = []
    sampler.add_listener(lambda _s, _now: ticks.append(round(time.time() - t0, 3)))
    sampler.start()
    time.sleep(31)
    sampler.stop()
    summary = {}
    for kind, name in TYPES.items():
        cpu = [c[2] for c in calls if c[1] == kind and ticks[0] < c[0] <= ticks[-1]]
        summary[name] = {"calls_first_to_last_tick": len(cpu),
                         "cpu_us_median": statistics.median(cpu) if cpu else None}
    doc = {"command": " ".join(["python3", *sys.argv]), "ticks": [ticks[0], ticks[-1], len(ticks)],
           "note": "the last tick is the step stop() makes (its final drains)",
           "summary": summary, "calls": calls}
    with open(sys.argv[1], "w") as f:
        json.dump(doc, f, indent=0)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
