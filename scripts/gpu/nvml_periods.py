"""Measure how often NVML's energy counter and power readings change on a real card.

Under a matmul load (torch with CUDA, in a child process, if present) it polls, one at a
time, the power reading (``nvmlDeviceGetPowerUsage``), the power field values (instant and
average, where the driver has them) and the total-energy counter as fast as each call
allows (about 1 ms apart), records when each value changes, and prints the median and p90
of the periods between changes, with the call costs and the power sample buffer's spacing.
A summary of a block shorter than these periods cannot be exact; nbgpu's resolution note
uses them.

    python scripts/gpu/nvml_periods.py --out periods.json [--seconds 4] [--gpu 0] [--sim]

``--sim`` runs the same code on simulated GPUs (for checking the script without a GPU).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

FI_POWER_AVERAGE, FI_POWER_INSTANT = 185, 186  # NVML_FI_DEV_POWER_AVERAGE / _INSTANT

LOAD = """
import sys, time, torch
a = torch.randn(8192, 8192, device=f"cuda:{sys.argv[1]}", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def start_load(gpu: int, seconds: float) -> tuple[subprocess.Popen | None, str]:
    """A child process keeping ``gpu`` busy with bf16 matmuls, or None and why not."""
    try:
        import torch
    except ImportError:
        return None, "no load: torch is not installed"
    if not torch.cuda.is_available():
        return None, "no load: torch has no CUDA here"
    proc = subprocess.Popen([sys.executable, "-c", LOAD, str(gpu), str(seconds)])
    return proc, f"bf16 8192x8192 matmuls on cuda:{gpu} in a child process (torch {torch.__version__})"


def periods(fn, seconds: float, pause_s: float = 0.001) -> dict:
    """Poll ``fn`` for ``seconds``; the periods between changes of its value, and its cost."""
    changes, costs = [], []
    last = object()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        try:
            value = fn()
        except Exception as exc:  # not supported on this card: say so in the output
            return {"error": f"{type(exc).__name__}: {exc}"}
        t1 = time.perf_counter()
        costs.append(t1 - t0)
        if value != last:
            changes.append(t1)
            last = value
        rest = pause_s - (time.perf_counter() - t0)
        if rest > 0:
            time.sleep(rest)
    gaps = np.diff(np.asarray(changes[1:]))  # the first change is just the first read
    out = {"polls": len(costs), "changes": len(changes) - 1,
           "call_us_median": round(float(np.median(costs)) * 1e6, 1)}
    if len(gaps):
        out.update(period_median_s=round(float(np.median(gaps)), 4),
                   period_p90_s=round(float(np.percentile(gaps, 90)), 4),
                   period_min_s=round(float(gaps.min()), 4))
    return out


def buffer_spacing(nvml, handle, seconds: float) -> dict:
    """Spacing of the power sample buffer's timestamps (``nvmlDeviceGetSamples``)."""
    time.sleep(min(seconds, 2.0))
    try:
        _vtype, samples = nvml.nvmlDeviceGetSamples(handle, 0, 0)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    ts = np.sort(np.array([s.timeStamp for s in samples], dtype=np.float64)) / 1e6
    gaps = np.diff(ts)
    return {"samples": len(ts), "spacing_median_s": round(float(np.median(gaps)), 4)
            if len(gaps) else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--seconds", type=float, default=4.0, help="polling time per reading")
    ap.add_argument("--gpu", type=int, default=0, help="NVML index of the card")
    ap.add_argument("--sim", action="store_true", help="simulated GPUs instead of NVML")
    args = ap.parse_args(argv)
    if args.sim:
        from nbgpu.sources.simulated import SimulatedGPUs

        nvml = SimulatedGPUs(count=args.gpu + 1)
    else:
        import pynvml as nvml
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(args.gpu)

    def text(v) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    def field(fid: int):
        value = nvml.nvmlDeviceGetFieldValues(handle, [fid])[0]
        if value.nvmlReturn != 0:
            raise RuntimeError(f"field {fid}: NVML return {value.nvmlReturn}")
        return value.value.uiVal

    load_s = 4 * args.seconds + 6
    proc, load = (None, "no load: simulated") if args.sim else start_load(args.gpu, load_s)
    time.sleep(0 if proc is None else 3.0)  # let clocks and power settle under load
    figures = {
        "power_usage": periods(lambda: nvml.nvmlDeviceGetPowerUsage(handle), args.seconds),
        "power_instant_field": periods(lambda: field(FI_POWER_INSTANT), args.seconds),
        "power_average_field": periods(lambda: field(FI_POWER_AVERAGE), args.seconds),
        "total_energy": periods(lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                                args.seconds),
        "power_samples_buffer": buffer_spacing(nvml, handle, args.seconds),
    }
    if proc is not None:
        proc.kill()
        proc.wait()
    result = {
        "device": text(nvml.nvmlDeviceGetName(handle)),
        "driver": text(nvml.nvmlSystemGetDriverVersion()),
        "simulated": bool(args.sim),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "python": platform.python_version(),
        "load": load,
        "seconds_per_reading": args.seconds,
        "figures": figures,
    }
    nvml.nvmlShutdown()
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"{result['device']} (driver {result['driver']}); {load}")
    for name, f in figures.items():
        if "error" in f:
            print(f"  {name:22s} {f['error']}")
        elif "period_median_s" in f:
            print(f"  {name:22s} changes every {f['period_median_s'] * 1e3:.1f} ms (median), "
                  f"p90 {f['period_p90_s'] * 1e3:.1f} ms; call {f['call_us_median']:.0f} µs; "
                  f"{f['changes']} changes in {f['polls']} polls")
        else:
            print(f"  {name:22s} {f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
