"""Per-cell cost of cell mode (``%gpumon --cells``): an in-process IPython shell runs a tiny
cell many times with cell mode off and on, alternating; the cost is the median difference."""

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


def _cell_ms(shell, runs: int) -> list[float]:
    out = []
    sink = io.StringIO()
    for _ in range(runs):
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            t0 = time.perf_counter()
            shell.run_cell(CELL, store_history=True)
            out.append(1000 * (time.perf_counter() - t0))
    return out


def _paired(shell, sampler, enable, disable, min_s: float, rounds: int, runs: int) -> dict:
    off, on = [], []
    for _ in range(rounds):
        off.extend(_cell_ms(shell, runs))
        enable(shell, lambda: sampler, min_s)
        try:
            on.extend(_cell_ms(shell, runs))
        finally:
            disable(shell)
    return {"min_duration_s": min_s, "off_ms": median(off), "on_ms": median(on),
            "cost_ms": median(on) - median(off), "cells_each": len(on)}


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
    sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=8, seed=0)).start()
    try:
        time.sleep(1.0)
        at_default = _paired(shell, sampler, enable_cell_mode, disable_cell_mode, default_min, rounds, runs)
        every = _paired(shell, sampler, enable_cell_mode, disable_cell_mode, 0.0, rounds, runs)
    finally:
        sampler.stop()
    out = Outcome(raw={"cell": CELL, "gpus": 8, "default": at_default, "every_cell": every})
    out.targets.append(Target(f"cell mode cost per cell (min_duration_s={default_min:g}, default)",
                              at_default["cost_ms"], "ms", "<=", HOOK_TARGET_MS))
    out.targets.append(Target("cell mode cost per cell, every cell profiled (min_duration_s=0)",
                              every["cost_ms"], "ms", "<=", HOOK_TARGET_MS,
                              note="includes building and showing each cell's report"))
    return out
