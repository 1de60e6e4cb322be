"""Where a live panel's refresh goes while the main thread works: its thread's CPU, step by step.

A panel over one simulated GPU (the interference benchmark's panel arm: a window of history,
its sampler backdated, messages sent as a kernel sends them where ipykernel is installed)
updates from its own timer while the main thread runs small numpy work without pause. Each
step of the refresh is timed with a thread-CPU timer around it (no profiler, so cold code
keeps its own cost; steps nest: "store read + buckets + points" is inside "lines"). The
first seconds, with the first full draw, are left out. The refresh runs once a second, cold,
as beside a training loop, not back to back as ``panel_refresh`` runs it.

    python -m benchmarks --only panel_sections
"""

from __future__ import annotations

import importlib
import importlib.util
import time

from .registry import Context
from .report import Outcome, UnavailableError

SETTLE_S = 3.0  # the first draw and the timer's first ticks
SECONDS = 20.0

# (module, owner, attribute, step name): the refresh's steps, outermost first.
STEPS = (
    ("nbgpu.widgets.monitor", "GPUMonitor", "refresh", "refresh, all of it"),
    ("nbgpu.widgets.monitor", "GPUMonitor", "_packed", "lines: points, scales, pixels"),
    ("nbgpu.widgets.monitor", "GPUMonitor", "_points", "store read + buckets + points"),
    ("nbgpu.store", "Store", "series_rows", "store read of the new rows"),
    ("nbgpu.widgets.spark", "SparkSet", "add_rows", "new rows into their buckets"),
    ("nbgpu.widgets.spark", "SparkSet", "points", "buckets to line points"),
    ("nbgpu.widgets.panel_draw", None, "pad_rows", "points to the mark's rows"),
    ("nbgpu.sampler", "Sampler", "latest", "newest readings and their states"),
    ("nbgpu.widgets.panel_draw", None, "value_texts", "value texts"),
    ("nbgpu.widgets.text", None, "grid_html", "the texts' HTML"),
    ("ipywidgets.widgets.widget", "Widget", "_send", "sending the messages"),
    ("nbgpu.widgets.panel_draw", "ProcessesLine", "refresh", "processes line"),
    ("nbgpu.sampler", "Sampler", "alert_list", "active alerts"),
    ("nbgpu.sampler", "Sampler", "status", "sampler status"),
    ("nbgpu.widgets.monitor", "GPUMonitor", "_draw_header", "header"),
)


def run(ctx: Context) -> Outcome:
    """Thread CPU of each refresh step, a panel on its timer, the main thread busy."""
    import numpy as np

    import nbgpu

    from .panel_driver import backdate, find_panel, prefill
    from .threadcpu import SectionTimers

    api = find_panel()
    if not api.available:
        raise UnavailableError(api.reason)
    timers = SectionTimers()
    for module, owner, attr, name in STEPS:
        where = importlib.import_module(module)
        timers.wrap(where if owner is None else getattr(where, owner), attr, name)
    seconds = 5.0 if ctx.quick else SECONDS
    try:
        history_s = api.default_window_s() + 5.0
        sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=1, seed=0))
        prefill(sampler, history_s)
        sampler.start()
        backdate(sampler, history_s)
        kernel_like = all(importlib.util.find_spec(m) is not None for m in ("ipykernel", "jupyter_client"))
        driven = api.drive(sampler, kernel_like=kernel_like)
        a = np.full(64, 0.5)
        t0 = time.perf_counter()
        settled = False
        try:
            while time.perf_counter() - t0 < SETTLE_S + seconds:
                if not settled and time.perf_counter() - t0 >= SETTLE_S:
                    timers.reset()
                    settled = True
                for _ in range(256):
                    a = a * 0.999 + 0.0005
        finally:
            facts = driven.stop()
            sampler.stop()
    finally:
        timers.undo()
    refreshes = max(timers.calls["refresh, all of it"], 1)
    steps = {name: {"us_per_refresh": timers.cpu_ns[name] / 1e3 / refreshes,
                    "calls_per_refresh": timers.calls[name] / refreshes} for *_, name in STEPS}
    out = Outcome(raw={"seconds": seconds, "refreshes_timed": refreshes, "comm": facts.get("comm"),
                       "panel": facts, "steps": steps})
    for name, step in steps.items():
        out.figure(f"{name}, per refresh", step["us_per_refresh"] / 1e3, "ms")
    return out
