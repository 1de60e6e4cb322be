"""The list of benchmarks, each a function of a ``Context`` returning an ``Outcome``."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from .env import GpuInfo
from .report import Outcome


@dataclass
class Context:
    """What every benchmark may look at: quick mode and the GPUs found."""

    quick: bool
    gpus: GpuInfo


@dataclass(frozen=True)
class Bench:
    """A named benchmark; ``part`` is "gpu" (real GPUs only) or "cpu" (runs anywhere)."""

    name: str
    part: str
    target: str  # "module:function" inside this package, imported only when run
    about: str

    def run(self, ctx: Context) -> Outcome:
        """Import the benchmark's module and run it."""
        module, func = self.target.split(":")
        fn: Callable[[Context], Outcome] = getattr(importlib.import_module(f"benchmarks.{module}"), func)
        return fn(ctx)


def all_benchmarks() -> list[Bench]:
    """Every benchmark in the order they run (GPU part first, then CPU part)."""
    return [Bench(name, part, target, about) for name, part, target, about in _TABLE]


_TABLE = [
    ("gpu_overhead", "gpu", "gpu_overhead:run_one_gpu",
     "steps/s of launch- and compute-bound loops under each monitor"),
    ("gpu_overhead_2gpu", "gpu", "gpu_overhead:run_two_gpus", "the same on two GPUs at once"),
    ("gpu_interference", "gpu", "gpu_interference:run_gpu",
     "launch-bound loop's excess time in the steps each monitor's threads ran in"),
    ("gpu_resolution", "gpu", "gpu_accuracy:run_resolution",
     "median spacing of power and utilisation points at defaults"),
    ("gpu_energy", "gpu", "gpu_accuracy:run_energy", "energy of a block vs the NVML energy counter"),
    ("gpu_duty_cycle", "gpu", "gpu_accuracy:run_duty_cycle",
     "utilisation vs busy fraction measured with CUDA events"),
    ("gpu_peak_memory", "gpu", "gpu_accuracy:run_peak_memory",
     "peak memory of a block vs torch's reserved memory + context"),
    ("gpu_sampler_cpu", "gpu", "sampler_cost:run_gpu_one",
     "sampler thread CPU seconds per wall second, one GPU"),
    ("gpu_sampler_cpu_2gpu", "gpu", "sampler_cost:run_gpu_two",
     "sampler thread CPU seconds per wall second, two GPUs"),
    ("gpu_stack_sampler_cpu", "gpu", "stack_cost:run_gpu",
     "sampler thread CPU with and without main-thread stack samples while a capture is open"),
    ("sim_stack_sampler_cpu", "cpu", "stack_cost:run_simulated",
     "the same on one simulated GPU"),
    ("gpu_flight_cost", "gpu", "flight_cost:run_gpu",
     "flight recorder CPU per wall second beside a real-GPU sampler, with a positive control"),
    ("sim_sampler_cpu", "cpu", "sampler_cost:run_simulated",
     "sampler thread CPU seconds per wall second, 8 simulated GPUs"),
    ("sim_sampler_python", "cpu", "sampler_cost:run_python",
     "nbgpu's own Python per sampler step (NVML stand-in's time taken out), 1 simulated GPU"),
    ("sim_interference", "cpu", "gpu_interference:run_simulated",
     "the interference method on a CPU loop, monitors watching a simulated GPU"),
    ("widget_traffic", "cpu", "cpu_widgets:run",
     "panel widget messages and bytes per second, interval 0.1 vs 0.5"),
    ("panel_refresh", "cpu", "cpu_widgets:run_refresh",
     "panel refresh CPU ms, 8 GPUs, 60 s and 15 min windows, beside the code before"),
    ("panel_sections", "cpu", "panel_sections:run",
     "a live panel's refresh step by step (thread CPU), the main thread busy, 1 simulated GPU"),
    ("flight_cost", "cpu", "flight_cost:run_simulated",
     "flight recorder CPU per wall second beside 8 simulated GPUs, with a positive control"),
    ("store_24h", "cpu", "cpu_store:run", "store memory after 24 h at defaults, 8 GPUs"),
    ("import_time", "cpu", "cpu_startup:run_import", "`import nbgpu` in a fresh interpreter"),
    ("cell_hook", "cpu", "cpu_cells:run", "per-cell cost of %gpumon --cells"),
    ("memory_walk", "cpu", "cpu_memory_walk:run",
     "memory_by_name over 10,000 names, one a 100,000-element list"),
    ("exporter_scrape", "cpu", "cpu_exporter:run", "Prometheus text of 8 GPUs"),
    ("first_panel_update", "cpu", "cpu_startup:run_first_update",
     "%load_ext nbgpu + %gpumon to the first panel update, real kernel"),
]
