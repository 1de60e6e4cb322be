"""Load rules: input-bound, idle / sync-bound and imbalance across GPUs."""

from __future__ import annotations

import itertools
import math

import numpy as np

from .alerts import Finding
from .window import Context, fmt_gpus

INPUT_HINT = ("Feed the GPU faster: DataLoader(num_workers=4 or more, pin_memory=True, "
              "persistent_workers=True, prefetch_factor=2 or more) with .to(device, non_blocking=True); "
              "move decoding and augmentation to the GPU or precompute them; with tf.data, "
              "num_parallel_calls and .prefetch(tf.data.AUTOTUNE). If one core is pegged launching "
              "small kernels, use larger batches or CUDA graphs.")
IDLE_HINT = ("The cell is waiting, not computing: file or network I/O, a lock, sleep, a "
             "host-device sync in a loop (.item(), .cpu(), print of a tensor) or another process. "
             "A profiler (torch.profiler, py-spy dump) shows where it waits.")
IMBALANCE_PARTS = 3  # the window is judged in this many parts; a GPU must lag in each
IMBALANCE_HINT = ("Check that every GPU gets its share: DistributedSampler and per-rank batch sizes, "
                  "a rank stuck in I/O or waiting at a barrier, an uneven model-parallel split, "
                  "tensors created on cuda:0 by default.")


def input_bound(ctx: Context) -> list[Finding]:
    """Utilisation below 50 % while this kernel's processes keep the CPU busy: a starved GPU."""
    th, out = ctx.thresholds, []
    span = th.input_window_s
    for dev in ctx.used_gpus():
        end = ctx.window.end(dev.key, "util_pct")  # the CPU over the same seconds
        cpu = ctx.window.host_mean("proc_cpu_pct", span, end)
        if not cpu >= th.input_cpu_busy_pct:
            continue
        util = ctx.window.mean(dev.key, "util_pct", span, end)
        if not (th.input_min_util_pct <= util < th.input_util_below_pct):
            continue
        message = (f"GPU {dev.key} busy only {util:.0f} % of the time while this kernel's "
                   f"processes use {cpu:.0f} % CPU (mean of {span:.0f} s): the GPU is waiting for input")
        out.append(Finding("input_bound", dev.key, "warning", message, INPUT_HINT, {
            "util_pct": round(util, 1), "proc_cpu_pct": round(cpu, 1), "window_s": span}))
    return out


def idle(ctx: Context) -> list[Finding]:
    """Utilisation and CPU both low while a cell runs: the code waits (I/O, sync, sleep)."""
    th, out = ctx.thresholds, []
    span = th.idle_window_s
    for dev in ctx.used_gpus():
        end = ctx.window.end(dev.key, "util_pct")  # the CPU and the cell over the same seconds
        if th.idle_only_in_cell and ctx.in_cell_s - (ctx.now - end) < span:
            continue
        cpu = ctx.window.host_mean("proc_cpu_pct", span, end)
        if not cpu < th.idle_cpu_below_pct:
            continue
        util = ctx.window.mean(dev.key, "util_pct", span, end)
        if not util < th.idle_util_below_pct:
            continue
        during = "while a cell runs, " if ctx.in_cell_s else ""
        message = (f"GPU {dev.key} idle ({util:.0f} % busy) and this kernel's CPU at {cpu:.0f} % "
                   f"{during}over {span:.0f} s: the code is waiting on something")
        out.append(Finding("idle", dev.key, "info", message, IDLE_HINT, {
            "util_pct": round(util, 1), "proc_cpu_pct": round(cpu, 1), "window_s": span,
            "in_cell_s": round(ctx.in_cell_s - (ctx.now - end), 1)}))  # by the window's end
    return out


def imbalance(ctx: Context) -> list[Finding]:
    """GPUs of this kernel differ in mean utilisation by more than 20 points, sustained."""
    th, span = ctx.thresholds, ctx.thresholds.imbalance_window_s
    used = ctx.used_gpus()
    if len(used) < 2:
        return []
    end = min(ctx.window.end(d.key, "util_pct") for d in used)  # every GPU over the same seconds
    means = {d.key: ctx.window.mean(d.key, "util_pct", span, end) for d in used}
    means = {g: u for g, u in means.items() if not math.isnan(u)}
    if len(means) < 2:
        return []
    lagging = set(means)
    for a, b in itertools.pairwise(np.linspace(end - span, end, IMBALANCE_PARTS + 1)):
        part = {}
        for g in means:  # the same GPU must lag in every part of the window: sustained
            t, v = ctx.window.series(g, "util_pct", span, end)
            sel = v[(t >= a) & (t <= b)]
            part[g] = float(np.mean(sel)) if len(sel) else math.nan
        top = max(part.values())
        lagging &= {g for g, u in part.items() if u < top - th.imbalance_gap_pct}
    top = max(means.values())
    lagging = sorted((g for g in lagging if means[g] < top - th.imbalance_gap_pct), key=str)
    busy = [g for g in means if g not in lagging]
    if not lagging:
        return []
    busy_mean = sum(means[g] for g in busy) / len(busy)
    plural = "are" if len(busy) > 1 else "is"
    out = []
    for g in lagging:
        state = "idle" if means[g] < 10 else "underused"
        message = (f"GPU {g} {state} ({means[g]:.0f} %) while {'GPUs' if len(busy) > 1 else 'GPU'} "
                   f"{fmt_gpus(busy)} {plural} busy ({busy_mean:.0f} %) over {span:.0f} s")
        out.append(Finding("imbalance", g, "warning", message, IMBALANCE_HINT, {
            "util_pct": round(means[g], 1), "busy_gpus": busy, "busy_util_pct": round(busy_mean, 1),
            "gap_pct": round(top - means[g], 1), "window_s": span,
            "gpus_compared": sorted(means, key=str)}))
    return out
