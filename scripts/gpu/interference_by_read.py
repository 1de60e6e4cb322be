"""Which of the sampler's reads slow a launch-bound loop: each NVML read alone, at its own period.

Runs the step-attributed interference method (``benchmarks/gpu_interference.py``) with one
arm per read the sampler makes, each a thread calling that read through pynvml at the
period the sampler uses, plus the sampler itself with and without diagnostics and host
reads (the two apart and together). NVML calls release the GIL, so a read whose loop time
lost exceeds its Python time slows the loop some other way (the driver, a wake-up); the
per-call figure says which.

    python scripts/gpu/interference_by_read.py --out by-read.json [--seconds 15] [--arms control,nbgpu]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.gpu_interference import PeriodicControlMonitor, measure_all
from benchmarks.gpu_loops import LaunchBound
from benchmarks.monitors import Monitor, NbgpuMonitor


class ReadMonitor(PeriodicControlMonitor):
    """The control's thread, but each wake-up calls ``read(pynvml, handle)`` of GPU 0."""

    def __init__(self, name: str, period_s: float, read: Callable[[object, object], None]) -> None:
        super().__init__(period_s, name)
        self._read = read
        self._nvml = self._handle = None

    def _run(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        try:
            self._nvml, self._handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
            super()._run()
        finally:
            pynvml.nvmlShutdown()

    def _work(self) -> None:
        self._read(self._nvml, self._handle)


def _samples(kind_name: str) -> Callable[[object, object], None]:
    def read(nvml, handle) -> None:
        try:
            nvml.nvmlDeviceGetSamples(handle, getattr(nvml, kind_name), 0)
        except nvml.NVMLError:
            pass
    return read


def _tick(nvml, handle) -> None:
    nvml.nvmlDeviceGetMemoryInfo(handle)
    nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)
    nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)
    nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)
    nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    nvml.nvmlDeviceGetEnforcedPowerLimit(handle)


def _energy(nvml, handle) -> None:
    nvml.nvmlDeviceGetTotalEnergyConsumption(handle)


class SamplerVariant(NbgpuMonitor):
    """``nbgpu.Sampler`` with keyword arguments (diagnostics or host reads off)."""

    def __init__(self, name: str, **kwargs) -> None:
        super().__init__("nvml", [0])
        self.name, self._kwargs = name, kwargs

    def start(self) -> None:
        import nbgpu

        self.sampler = nbgpu.Sampler(source=self.source, gpus=self.gpus, **self._kwargs)
        self.sampler.start()


def arms() -> dict[str, Callable[[], Monitor]]:
    return {
        "control": lambda: PeriodicControlMonitor(1.0),
        "util_drain_every_2s": lambda: ReadMonitor("util_drain", 2.0,
                                                   _samples("NVML_GPU_UTILIZATION_SAMPLES")),
        "power_drain_every_1s": lambda: ReadMonitor("power_drain", 1.0, _samples("NVML_TOTAL_POWER_SAMPLES")),
        "tick_reads_every_1s": lambda: ReadMonitor("tick_reads", 1.0, _tick),
        "energy_every_1s": lambda: ReadMonitor("energy", 1.0, _energy),
        "nbgpu": lambda: SamplerVariant("nbgpu"),
        "nbgpu_no_diagnostics": lambda: SamplerVariant("nbgpu_no_diag", diagnostics=False),
        "nbgpu_no_host": lambda: SamplerVariant("nbgpu_no_host", host=False),
        "nbgpu_no_diagnostics_no_host": lambda: SamplerVariant("nbgpu_bare", diagnostics=False, host=False),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--arms", default=None, help="comma-separated arm names (default: all)")
    args = ap.parse_args()
    factories = arms()
    if args.arms:
        unknown = set(args.arms.split(",")) - set(factories)
        if unknown:
            ap.error(f"unknown arms {sorted(unknown)}; choose from {sorted(factories)}")
        factories = {name: factories[name] for name in args.arms.split(",")}
    t0 = time.time()
    result = measure_all(LaunchBound(["cuda:0"]), factories, list(factories), args.seconds, 1.0)
    rows = {}
    for name, arm in result["arms"].items():
        calls = arm["monitor_facts"].get("wakes")  # the read arms and the control: one a wake-up
        rows[name] = {
            "slowdown_pct": arm["slowdown_pct"], "ci95_pct": arm["ci95_pct"],
            "loop_lost_ms_per_s": 1000.0 * arm["excess_s"] / arm["wall_s"],
            "threads_cpu_ms_per_s": 1000.0 * arm["threads_cpu_s_per_s"],
            "loop_lost_us_per_call": (1e6 * arm["excess_s"] / calls) if calls else None,
            "calls": calls, "touched_fraction": arm["touched_fraction"]}
        print(f"{name:32s} {arm['slowdown_pct']:+.3f} % [{arm['ci95_pct'][0]:+.3f}, "
              f"{arm['ci95_pct'][1]:+.3f}]  lost {rows[name]['loop_lost_ms_per_s']:.2f} ms/s  "
              f"thread CPU {rows[name]['threads_cpu_ms_per_s']:.2f} ms/s")
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    device, driver = pynvml.nvmlDeviceGetName(handle), pynvml.nvmlSystemGetDriverVersion()
    pynvml.nvmlShutdown()
    args.out.write_text(json.dumps({
        "command": "python3 scripts/gpu/interference_by_read.py " + " ".join(sys.argv[1:]),
        "device": device, "driver": driver,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0)),
        "loop": LaunchBound.about, "seconds_per_arm": args.seconds, "arms": rows,
        "skipped": result["skipped"]}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
