"""Benchmark 4: CPU seconds per wall second of the sampler thread at default settings."""

from __future__ import annotations

from .registry import Context
from .report import Outcome, UnavailableError
from .threadcpu import measure


def _run(ctx: Context, source: object, gpus: list[int] | None, label: str) -> Outcome:
    import nbgpu

    seconds = 4.0 if ctx.quick else 12.0
    sampler = nbgpu.Sampler(source=source, gpus=gpus)
    res = measure(sampler, seconds)
    res.update(devices=len(sampler.devices), interval_s=sampler.interval, source=sampler.source.describe())
    out = Outcome(raw=res)
    out.figure(f"sampler thread CPU, {label}", res["cpu_s_per_s"], "CPU s/s")
    out.figure("CPU ms per tick", 1000 * res.get("thread_cpu_s", float("nan")) / max(res["ticks"] - 1, 1),
               "ms")
    return out


def run_gpu_one(ctx: Context) -> Outcome:
    """One real GPU (GPU 0), defaults."""
    return _run(ctx, "nvml", [0], "1 GPU")


def run_gpu_two(ctx: Context) -> Outcome:
    """Two real GPUs (0 and 1), defaults."""
    if len(ctx.gpus.names) < 2:
        raise UnavailableError(f"needs 2 GPUs, this machine has {len(ctx.gpus.names)}")
    return _run(ctx, "nvml", [0, 1], "2 GPUs")


def run_simulated(ctx: Context) -> Outcome:
    """Eight simulated GPUs (the in-process NVML stand-in, so more Python work than real NVML)."""
    import nbgpu

    out = _run(ctx, nbgpu.SimulatedGPUs(count=8, seed=0), None, "8 simulated GPUs")
    out.notes.append("Simulated GPUs compute their readings in Python inside the NVML calls, so "
                     "this over-states the cost of real NVML reads.")
    return out
