"""Per-cell cost of cell mode (``%gpumon --cells``): an in-process IPython shell runs a tiny
cell many times with cell mode off and on, alternating; the cost is the median difference.

Each cell is timed by the wall clock and by the process's CPU time (every thread: the
main thread's hooks and summary, and the sampler thread's edge and fast-memory reads the
cell asks for), with 1 and with 8 simulated GPUs. Simulated GPUs compute their readings in
Python under the GIL, so their reads cost far more than real NVML reads (≈1–10 µs a call,
the energy counter ≈3 ms with the GIL released): these figures over-state a real card's.

The raw output also carries, per arm, where an every-cell-profiled cell's main-thread time
goes (``phases_ms``: medians of separately timed cells, after the paired runs so the timers
do not touch the headline figures) and the NVML calls a profiled cell adds, by function
(``nvml_calls``: calls counted at nbgpu's NVML gateway while cells run with cell mode on,
minus the sampler's own rate measured while cells run with it off).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import time
from collections import Counter

from .registry import Context
from .report import Outcome, Target, UnavailableError
from .stats import median

HOOK_TARGET_MS = 5.0
CELL = "x = sum(range(10))"
GPU_COUNTS = (1, 8)


class _CallCount:
    """NVML calls by function at a source's gateway (``NVMLSource._gw.call``), counted per arm."""

    def __init__(self, sampler) -> None:
        self.counts: Counter = Counter()
        self.arms = {"off": [Counter(), 0.0, 0], "on": [Counter(), 0.0, 0]}  # calls, seconds, cells
        gw = getattr(sampler.source, "_gw", None)
        self.ok = gw is not None and callable(getattr(gw, "call", None))
        if self.ok:
            real = gw.call

            def call(function: str, *args):
                self.counts[function] += 1
                return real(function, *args)

            gw.call = call

    @contextlib.contextmanager
    def arm(self, name: str, cells: int):
        before, t0 = Counter(self.counts), time.perf_counter()
        try:
            yield
        finally:
            got = self.arms[name]
            got[0].update(self.counts - before)
            got[1] += time.perf_counter() - t0
            got[2] += cells

    def per_cell(self) -> dict:
        """Calls a profiled cell adds, by function: on-arm calls minus the off arm's rate."""
        if not self.ok:
            return {"note": "no NVML gateway on this source"}
        (on, on_s, on_n), (off, off_s, _) = self.arms["on"], self.arms["off"]
        if not on_n or off_s <= 0:
            return {}
        per_cell_s = on_s / on_n
        extra = {f: (on[f] - off[f] / off_s * on_s) / on_n for f in sorted(set(on) | set(off))}
        return {"added_per_cell": {f: round(v, 3) for f, v in extra.items() if abs(v) >= 0.005},
                "added_total_per_cell": round(sum(extra.values()), 3),
                "on_per_cell": {f: round(on[f] / on_n, 3) for f in sorted(on)},
                "off_per_second": {f: round(off[f] / off_s, 2) for f in sorted(off)},
                "cell_s": per_cell_s}


def _cell_ms(shell, runs: int, count: _CallCount | None = None, arm: str = "off"
             ) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    sink = io.StringIO()
    with count.arm(arm, runs) if count is not None else contextlib.nullcontext():
        for _ in range(runs):
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                c0, t0 = time.process_time(), time.perf_counter()
                shell.run_cell(CELL, store_history=True)
                wall.append(1000 * (time.perf_counter() - t0))
                cpu.append(1000 * (time.process_time() - c0))
    return wall, cpu


def _paired(shell, sampler, enable, disable, min_s: float, rounds: int, runs: int,
            count: _CallCount | None = None) -> dict:
    off_w, off_c, on_w, on_c = [], [], [], []
    for _ in range(rounds):
        w, c = _cell_ms(shell, runs, count, "off")
        off_w.extend(w)
        off_c.extend(c)
        enable(shell, lambda: sampler, min_s)
        try:
            w, c = _cell_ms(shell, runs, count, "on")
            on_w.extend(w)
            on_c.extend(c)
        finally:
            disable(shell)
    return {"min_duration_s": min_s, "off_ms": median(off_w), "on_ms": median(on_w),
            "cost_ms": median(on_w) - median(off_w),
            "off_cpu_ms": median(off_c), "on_cpu_ms": median(on_c),
            "cpu_cost_ms": median(on_c) - median(off_c), "cells_each": len(on_w)}


# Main-thread phases of a profiled cell: (name, module, attribute); each is timed inclusively
# (post_run_cell holds the rest; against_last holds figures, whose first read is the summary).
PHASES = (
    ("pre_run_cell", "nbgpu.profiles.cells", "_CellMode.pre_run_cell"),
    ("post_run_cell", "nbgpu.profiles.cells", "_CellMode.post_run_cell"),
    ("capture_finish (edge wait)", "nbgpu.profiles.capture", "Capture.finish"),
    ("record", "nbgpu.profiles.cells", "add_record"),
    ("against_last (incl. figures)", "nbgpu.profiles.cells", "against_last"),
    ("figures (incl. summary)", "nbgpu.profiles.history", "capture_figures"),
    ("summarize", "nbgpu.profiles.capture", "summarize"),
    ("display (incl. html/svg)", "nbgpu.profiles.cells", "_show_one_line"),
    ("static_svg", "nbgpu.profiles.render", "static_svg"),
    ("summary_html", "nbgpu.profiles.render", "summary_html"),
)


def _phases(shell, sampler, enable, disable, runs: int) -> dict:
    """Median ms per cell of each phase in ``PHASES`` (those this tree has), every cell profiled."""
    times: dict[str, list[float]] = {}
    patched = []
    for name, module, attr in PHASES:
        owner = importlib.import_module(module)
        *path, leaf = attr.split(".")
        for part in path:
            owner = getattr(owner, part, None)
        fn = getattr(owner, leaf, None) if owner is not None else None
        if fn is None:
            continue

        def timed(*args, _fn=fn, _name=name, **kwargs):
            t0 = time.perf_counter()
            try:
                return _fn(*args, **kwargs)
            finally:
                times.setdefault(_name, []).append(1000 * (time.perf_counter() - t0))

        setattr(owner, leaf, timed)
        patched.append((owner, leaf, fn))
    try:
        enable(shell, lambda: sampler, 0.0)
        try:
            _cell_ms(shell, runs)
        finally:
            disable(shell)
    finally:
        for owner, leaf, fn in reversed(patched):
            setattr(owner, leaf, fn)
    return {name: round(median(v), 4) for name, v in times.items() if len(v) >= runs // 2}


def run(ctx: Context) -> Outcome:
    import nbgpu

    try:
        from nbgpu.profiles.cells import disable_cell_mode, enable_cell_mode
    except ImportError as exc:
        raise UnavailableError(f"cell mode not available in this tree: {exc}") from exc
    from IPython.core.interactiveshell import InteractiveShell

    from nbgpu.config import settings

    default_min = settings().cells_min_s  # what a cell mode given no threshold uses
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
            calls = _CallCount(sampler)
            every = _paired(shell, sampler, enable_cell_mode, disable_cell_mode, 0.0, rounds, runs,
                            calls)
            phases = _phases(shell, sampler, enable_cell_mode, disable_cell_mode, rounds * runs)
        finally:
            sampler.stop()
        raw["real_nvml" if count == "nvml" else f"gpus_{count}"] = {
            "default": at_default, "every_cell": every, "phases_ms": phases,
            "nvml_calls": calls.per_cell()}
        out.targets.append(Target(f"cell mode cost per cell, {gpus} (min_duration_s={default_min:g}, "
                                  "default)", at_default["cost_ms"], "ms", "<=", HOOK_TARGET_MS))
        out.targets.append(Target(f"cell mode cost per cell, {gpus}, every cell profiled "
                                  "(min_duration_s=0)", every["cost_ms"], "ms", "<=", HOOK_TARGET_MS,
                                  note="wall clock; includes building and showing each cell's report"))
        out.figure(f"CPU per cell, {gpus}, every cell profiled (all threads)", every["cpu_cost_ms"], "ms")
    out.notes.append("simulated GPUs compute readings in Python: their reads cost more CPU than "
                     "real NVML's, so the figures over-state a real card's")
    return out
