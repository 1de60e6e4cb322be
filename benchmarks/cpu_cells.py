"""Per-cell cost of cell mode (``%gpumon --cells``): an in-process IPython shell runs a tiny
cell many times with cell mode off and on, alternating; the cost is the median difference.

Each cell is timed by the wall clock and by the process's CPU time (every thread: the
main thread's hooks and summary, and the sampler thread's edge and fast-memory reads the
cell asks for), with 1 and with 8 simulated GPUs. Simulated GPUs compute their readings in
Python under the GIL, so their reads cost far more than real NVML reads (≈1–10 µs a call,
the energy counter ≈3 ms with the GIL released): these figures over-state a real card's.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import time

from .registry import Context
from .report import Outcome, Target, UnavailableError
from .stats import median

HOOK_TARGET_MS = 5.0
CELL = "x = sum(range(10))"
GPU_COUNTS = (1, 8)


def _cell_ms(shell, runs: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    sink = io.StringIO()
    for _ in range(runs):
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            c0, t0 = time.process_time(), time.perf_counter()
            shell.run_cell(CELL, store_history=True)
            wall.append(1000 * (time.perf_counter() - t0))
            cpu.append(1000 * (time.process_time() - c0))
    return wall, cpu


def _paired(shell, sampler, enable, disable, min_s: float, rounds: int, runs: int) -> dict:
    off_w, off_c, on_w, on_c = [], [], [], []
    for _ in range(rounds):
        w, c = _cell_ms(shell, runs)
        off_w.extend(w)
        off_c.extend(c)
        enable(shell, lambda: sampler, min_s)
        try:
            w, c = _cell_ms(shell, runs)
            on_w.extend(w)
            on_c.extend(c)
        finally:
            disable(shell)
    return {"min_duration_s": min_s, "off_ms": median(off_w), "on_ms": median(on_w),
            "cost_ms": median(on_w) - median(off_w),
            "off_cpu_ms": median(off_c), "on_cpu_ms": median(on_c),
            "cpu_cost_ms": median(on_c) - median(off_c), "cells_each": len(on_w)}


def run(ctx: Context) -> Outcome:
    import nbgpu

    try:
        from nbgpu.profiles.cells import disable_cell_mode, enable_cell_mode
    except ImportError as exc:
        raise UnavailableError(f"cell mode not available in this tree: {exc}") from exc
    from IPython.core.interactiveshell import InteractiveShell

    default_min = inspect.signature(enable_cell_mode).parameters["min_duration_s"].default
    if default_min is inspect.Parameter.empty:
        default_min = 0.0
    rounds, runs = (3, 10) if ctx.quick else (8, 25)
    shell = InteractiveShell.instance()
    raw: dict = {"cell": CELL, "source": "simulated GPUs (reads over-state real NVML's cost)"}
    out = Outcome(raw=raw)
    arms: list[tuple[str, object]] = []
    if ctx.gpus.names:  # a real card: the figure the target is about
        arms.append((f"{len(ctx.gpus.names)} real GPU{'s' if len(ctx.gpus.names) > 1 else ''} (NVML)",
                     "nvml"))
    arms += [(f"{c} simulated GPU{'s' if c > 1 else ''}", c) for c in GPU_COUNTS]
    for gpus, what in arms:
        count = what
        source = "nvml" if what == "nvml" else nbgpu.SimulatedGPUs(count=what, seed=0)
        sampler = nbgpu.Sampler(source=source).start()
        try:
            time.sleep(1.0)
            at_default = _paired(shell, sampler, enable_cell_mode, disable_cell_mode, default_min,
                                 rounds, runs)
            every = _paired(shell, sampler, enable_cell_mode, disable_cell_mode, 0.0, rounds, runs)
        finally:
            sampler.stop()
        raw["real_nvml" if count == "nvml" else f"gpus_{count}"] = {"default": at_default,
                                                                    "every_cell": every}
        out.targets.append(Target(f"cell mode cost per cell, {gpus} (min_duration_s={default_min:g}, "
                                  "default)", at_default["cost_ms"], "ms", "<=", HOOK_TARGET_MS))
        out.targets.append(Target(f"cell mode cost per cell, {gpus}, every cell profiled "
                                  "(min_duration_s=0)", every["cost_ms"], "ms", "<=", HOOK_TARGET_MS,
                                  note="wall clock; includes building and showing each cell's report"))
        out.figure(f"CPU per cell, {gpus}, every cell profiled (all threads)", every["cpu_cost_ms"], "ms")
    out.notes.append("simulated GPUs compute readings in Python: their reads cost more CPU than "
                     "real NVML's, so the figures over-state a real card's")
    return out
