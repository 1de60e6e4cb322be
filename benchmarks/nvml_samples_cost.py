"""Thread CPU of one sample-buffer drain on a real GPU: pynvml's ``nvmlDeviceGetSamples`` (a size
query, then the read: two driver calls) against nbgpu's gateway (one C call into a kept buffer).

Run on a GPU machine: ``python -m benchmarks.nvml_samples_cost [--reads N] [--out DIR]``; the two
ways alternate read by read, each asking for the samples of the last second, so drift falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from .kernel_cost import run_facts


def main(argv: list[str] | None = None) -> int:
    import pynvml

    from nbgpu.sources.nvml_gateway import NVMLGateway

    p = argparse.ArgumentParser(prog="python -m benchmarks.nvml_samples_cost")
    p.add_argument("--reads", type=int, default=200, help="reads of each way and buffer")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    a = p.parse_args(argv)
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    gw = NVMLGateway(pynvml)
    got: dict = {}
    for name, kind in (("power", pynvml.NVML_TOTAL_POWER_SAMPLES),
                       ("utilisation", pynvml.NVML_GPU_UTILIZATION_SAMPLES)):
        us: dict[str, list[float]] = {"pynvml_two_calls": [], "gateway_one_call": []}
        for _ in range(a.reads):
            since = int((time.time() - 1.0) * 1e6)
            ways = (("pynvml_two_calls", pynvml.nvmlDeviceGetSamples), ("gateway_one_call", gw.samples))
            for way, read in ways:
                c0 = time.thread_time()
                try:
                    read(h, kind, since)
                except Exception:  # nothing new in the last second: timed all the same
                    pass
                us[way].append((time.thread_time() - c0) * 1e6)
            time.sleep(0.005)
        got[name] = {way: {"median_us": float(np.median(v)), "mean_us": float(np.mean(v))}
                     for way, v in us.items()}
        got[name]["ratio_of_medians"] = (got[name]["gateway_one_call"]["median_us"]
                                         / got[name]["pynvml_two_calls"]["median_us"])
        print(name, {k: round(v["median_us"], 1) for k, v in got[name].items() if isinstance(v, dict)},
              f"ratio {got[name]['ratio_of_medians']:.2f}")
    pynvml.nvmlShutdown()
    got.update(run_facts("benchmarks.nvml_samples_cost", sys.argv[1:] if argv is None else argv))
    path = Path(a.out) / "nvml-samples-cost.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(got, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
