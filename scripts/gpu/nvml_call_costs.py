"""What the sampler's NVML reads cost on a real card: CPU time per call, and per sample drained.

Times ``nvmlDeviceGetSamples`` for power and utilisation with buffers of different ages
(so a fixed per-call cost can be told from a per-sample one); then pynvml's drain split into
its two NVML calls (the size query with no array, then the call that fills an array), back
to back and spaced 0.25 s apart (the sampler calls them cold), which says whether one call
into a large enough array would save anything; the energy counter, GPM sample reads, the
cheap per-tick getters, and the host read (psutil) that a tick adds.
The floor of the sampler's CPU at native resolution follows from these figures.

    python scripts/gpu/nvml_call_costs.py --out costs.json [--gpu 0]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path


@contextlib.contextmanager
def one_gpu(description: str) -> Iterator[tuple]:
    """A cost script's ``--out``/``--gpu`` arguments and NVML opened on that GPU: yields (args,
    pynvml, handle, results) with the results' device, driver and command filled in, and
    shuts NVML down after."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--gpu", type=int, default=0)
    args = ap.parse_args()
    import pynvml as nv

    nv.nvmlInit()
    try:
        h = nv.nvmlDeviceGetHandleByIndex(args.gpu)
        yield args, nv, h, {"device": nv.nvmlDeviceGetName(h), "driver": nv.nvmlSystemGetDriverVersion(),
                            "command": " ".join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
                            "figures": {}}
    finally:
        nv.nvmlShutdown()


def write_results(out: dict, path: Path) -> int:
    """Print the results and write them to ``path`` as JSON; the script's exit status."""
    text = json.dumps(out, indent=2)
    print(text)
    path.write_text(text + "\n")
    return 0


def cpu_cost_us(fn, repeats: int) -> dict:
    """Median and p90 CPU µs (thread time) and wall µs per call of ``fn``."""
    cpu, wall = [], []
    for _ in range(repeats):
        c0, w0 = time.thread_time(), time.perf_counter()
        fn()
        cpu.append(1e6 * (time.thread_time() - c0))
        wall.append(1e6 * (time.perf_counter() - w0))
    cpu.sort()
    return {"cpu_us_median": statistics.median(cpu), "cpu_us_p90": cpu[int(0.9 * (len(cpu) - 1))],
            "wall_us_median": statistics.median(wall), "calls": repeats}


def spaced_cost_us(fn, repeats: int, gap_s: float) -> dict:
    """``cpu_cost_us`` of calls ``gap_s`` apart (caches and clocks gone cold between them)."""
    cpu = []
    for _ in range(repeats):
        time.sleep(gap_s)
        c0 = time.thread_time()
        fn()
        cpu.append(1e6 * (time.thread_time() - c0))
    cpu.sort()
    return {"cpu_us_median": statistics.median(cpu), "cpu_us_p90": cpu[int(0.9 * (len(cpu) - 1))],
            "calls": repeats, "gap_s": gap_s}


def drain_ways(nv, h, kinds: dict) -> dict:
    """Per buffer, the last second drained by pynvml (two NVML calls), and each of its two calls
    alone: the size query (no array) and the fill (into an array of 256), back to back and spaced."""
    import ctypes

    c_fn = nv._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
    out = {}
    for name, kind in kinds.items():
        _, samples = nv.nvmlDeviceGetSamples(h, kind, 0)
        since = int(max(s.timeStamp for s in samples) - 1e6)

        def two(kind=kind, since=since):
            try:
                nv.nvmlDeviceGetSamples(h, kind, since)
            except nv.NVMLError_NotFound:
                pass

        def c_call(array, kind=kind, since=since):
            vtype, count = ctypes.c_uint(0), ctypes.c_uint(0 if array is None else len(array))
            c_fn(h, ctypes.c_uint(kind), ctypes.c_ulonglong(since), ctypes.byref(vtype),
                 ctypes.byref(count), array)

        array = (nv.c_nvmlSample_t * 256)()
        size = partial(c_call, None)
        fill = partial(c_call, array)
        for way, fn in (("pynvml, both calls", two), ("size query alone", size),
                        ("fill alone (array of 256)", fill)):
            out[f"drain {name}, last 1 s, {way}"] = cpu_cost_us(fn, 30)
            out[f"drain {name}, last 1 s, {way}, 0.25 s apart"] = spaced_cost_us(fn, 12, 0.25)
    return out


def main() -> int:
    with one_gpu(__doc__.splitlines()[0]) as (args, nv, h, out):
        fig = out["figures"]
        kinds = {"power": nv.NVML_TOTAL_POWER_SAMPLES, "util": nv.NVML_GPU_UTILIZATION_SAMPLES,
                 "memutil": nv.NVML_MEMORY_UTILIZATION_SAMPLES}
        for name, kind in kinds.items():
            _, samples = nv.nvmlDeviceGetSamples(h, kind, 0)
            newest = max(s.timeStamp for s in samples)
            for age_s in (0.0, 0.2, 1.0, 2.0, 10.0):
                since = int(newest - age_s * 1e6) if age_s else 0

                def drain(since=since, kind=kind):
                    try:
                        nv.nvmlDeviceGetSamples(h, kind, since)
                    except nv.NVMLError_NotFound:
                        pass

                try:
                    _, got = nv.nvmlDeviceGetSamples(h, kind, since)
                    n = len(got)
                except nv.NVMLError_NotFound:
                    n = 0
                label = "whole buffer" if not age_s else f"last {age_s:g} s"
                fig[f"samples {name}, {label}"] = dict(cpu_cost_us(drain, 30), samples_returned=n)
        fig.update(drain_ways(nv, h, kinds))
        fig["total energy"] = cpu_cost_us(lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h), 20)
        for label, fn in {
            "utilization rates": lambda: nv.nvmlDeviceGetUtilizationRates(h),
            "memory info": lambda: nv.nvmlDeviceGetMemoryInfo(h),
            "power usage": lambda: nv.nvmlDeviceGetPowerUsage(h),
            "temperature": lambda: nv.nvmlDeviceGetTemperature(h, 0),
            "clock info (SM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "clock event reasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            "enforced power limit": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h),
            "running compute processes": lambda: nv.nvmlDeviceGetComputeRunningProcesses(h),
        }.items():
            fig[label] = cpu_cost_us(fn, 200)
        try:
            sample = nv.nvmlGpmSampleAlloc()
            try:
                fig["GPM sample get"] = cpu_cost_us(lambda: nv.nvmlGpmSampleGet(h, sample), 50)
            finally:
                nv.nvmlGpmSampleFree(sample)
        except nv.NVMLError as exc:
            fig["GPM sample get"] = {"error": str(exc)}
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        from nbgpu.sources.host import HostSource

        host = HostSource()
        host.read(time.time())
        fig["host read (psutil, process tree)"] = cpu_cost_us(lambda: host.read(time.time()), 50)
    except Exception as exc:  # the host read is context, not the point of this script
        fig["host read (psutil, process tree)"] = {"error": f"{type(exc).__name__}: {exc}"}
    return write_results(out, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
