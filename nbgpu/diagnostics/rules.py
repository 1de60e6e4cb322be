"""Load and card rules: input-, launch- and sync-bound (by what held the main thread's stack
samples; without them only input-bound, from the CPU), idle, imbalance, throttling, busy-but-thin."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..metrics import CLOCK_EVENT_REASONS, HOST_KEY, THROTTLE_BITS
from .alerts import Finding
from .stacks import LABELS
from .window import Context

INPUT_HINT = ("Feed the GPU faster: DataLoader(num_workers=4 or more, pin_memory=True, "
              "persistent_workers=True, prefetch_factor=2 or more) with .to(device, non_blocking=True); "
              "move decoding and augmentation to the GPU or precompute them; with tf.data, "
              "num_parallel_calls and .prefetch(tf.data.AUTOTUNE).")
MAYBE_HINT = INPUT_HINT + (" If instead one core is pegged launching small kernels, use larger "
                           "batches or CUDA graphs; a %%gpumon cell tells the two apart.")
LAUNCH_HINT = ("Python issues kernels too small to keep the GPU busy: use larger batches, CUDA graphs "
               "(torch.compile(mode=\"reduce-overhead\") or torch.cuda.CUDAGraph), torch.compile to fuse "
               "small operations, and fewer .item() / .cpu() syncs in the loop.")
SYNC_HINT = ("Each wait stops Python from queueing the next work, so the GPU idles meanwhile: keep "
             "values on the GPU and read them every N steps (sum the loss as a tensor, .item() once "
             "an epoch), leave tensors out of print() and .cpu() / .numpy() in the loop, copy with "
             "non_blocking=True, time work with CUDA events.")
# The main thread's categories that hold each rule's time. Input is the data loader and the
# host-to-device copies alike: both are the batch on its way to the GPU (pinned memory and
# non_blocking copies help the second as workers help the first).
HELD_BY = {"input_bound": ("data_loader", "h2d_copy"), "launch_bound": ("gpu_issue",),
           "sync_bound": ("gpu_wait",)}
IDLE_HINT = ("The cell is waiting, not computing: file or network I/O, a lock, sleep, a "
             "host-device sync in a loop (.item(), .cpu(), print of a tensor) or another process. "
             "A profiler (torch.profiler, py-spy dump) shows where it waits.")
IMBALANCE_PARTS = 3  # the window is judged in this many parts; a GPU must lag in each
IMBALANCE_HINT = ("Check that every GPU gets its share: DistributedSampler and per-rank batch sizes, "
                  "a rank stuck in I/O or waiting at a barrier, an uneven model-parallel split, "
                  "tensors created on cuda:0 by default.")


def holder(split, th) -> str | None:
    """The one of input-, launch- and sync-bound whose categories hold the largest share of the
    split, if at least ``split_min_share``; else None."""
    rule = max(HELD_BY, key=lambda r: held_share(split, r))
    return rule if held_share(split, rule) >= th.split_min_share else None


def held_share(split, rule: str) -> float:
    """The share of the main thread's time in the categories that hold ``rule``'s time."""
    return sum(split.shares[c] for c in HELD_BY[rule])


def one_bottleneck(alerts: list, split) -> list:
    """A cell's alerts with at most one of input-, launch- and sync-bound per GPU: the one holding
    most of the cell's time (``split``; without one, the one judged last)."""
    kept, out = {}, []
    for a in alerts:
        if a.rule not in HELD_BY:
            out.append(a)
            continue
        other = kept.get(a.gpu)
        if other is None or (held_share(split, a.rule) > held_share(split, other.rule)
                             if split is not None else a.start >= other.start):
            kept[a.gpu] = a
    return out + [a for a in alerts if a in kept.values()]


# Input-bound: utilisation 5-50 % while getting data in holds the main thread's time (without stack
# samples: while this kernel's processes keep the CPU busy: maybe starved); launch-bound: issuing GPU
# work holds it while the GPU is underused or busy-but-thin; sync-bound: waiting for the GPU holds it
# while the GPU is not kept busy. Each rule's message ({share} %, {where}: its line) and suggestion.
BOUND = {
    "input_bound": ("GPU {gpu} busy only {util:.0f} % of the time while the main thread spent {share:.0f} "
                    "% of it getting data in ({parts}){where} (over {span:.0f} s): the GPU is waiting for "
                    "input", INPUT_HINT),
    "launch_bound": ("GPU {gpu} {state} while the main thread spent {share:.0f} % of the time issuing GPU "
                     "work from Python{where} (over {span:.0f} s): the loop is launch-bound", LAUNCH_HINT),
    "sync_bound": ("the main thread spent {share:.0f} % of the time waiting for GPU {gpu}{where} while it "
                   "was busy only {util:.0f} % (over {span:.0f} s): the loop is sync-bound", SYNC_HINT)}


def bound(ctx: Context, rule: str) -> list[Finding]:
    """The findings of ``rule``, one of ``BOUND``'s: the GPU underused while its categories hold the
    main thread's time."""
    th, out = ctx.thresholds, []
    span = th.input_window_s
    for dev in ctx.used_gpus():
        end = ctx.window.end(dev.key, "util_pct")  # the CPU and the stacks over the same seconds
        # where the main thread's time went (if samples cover most): ``rule`` holds it (input: or none)
        split = ctx.stacks.split(end - span, end, coverage=0.8) if ctx.stacks is not None else None
        if (split is None and rule != "input_bound") or (split is not None and holder(split, th) != rule):
            continue
        util = ctx.window.mean(dev.key, "util_pct", span, end)
        figures, words = {"util_pct": round(util, 1)}, {"state": f"busy only {util:.0f} % of the time"}
        underused = th.input_min_util_pct <= util < th.input_util_below_pct
        if rule == "input_bound":
            cpu = ctx.window.mean(HOST_KEY, "proc_cpu_pct", span, end)
            figures["proc_cpu_pct"] = round(cpu, 1)
            if not underused or (split is None and not cpu >= th.input_cpu_busy_pct):
                continue
            if split is None:
                message = (f"GPU {dev.key} busy only {util:.0f} % of the time while this kernel's "
                           f"processes use {cpu:.0f} % CPU (mean of {span:.0f} s): the GPU may be waiting "
                           "for input, or for Python launching small kernels")
                figures["window_s"] = span
                out.append(Finding(rule, dev.key, "warning", message, MAYBE_HINT, figures))
                continue
            words["parts"] = ", ".join(f"{LABELS[c]} {100 * split.shares[c]:.0f} %" for c in HELD_BY[rule]
                                       if split.shares[c] >= 0.05)
        elif rule == "launch_bound":
            active = ctx.window.mean(dev.key, "sm_active_pct", span, end)
            figures["sm_active_pct"] = None if math.isnan(active) else round(active, 1)
            if not underused:
                if not (util >= th.thin_util_above_pct and active < th.thin_sm_active_below_pct):
                    continue
                words["state"] = (f"looks busy ({util:.0f} %) but its SMs are mostly unused "
                                  f"(SM activity {active:.0f} %)")
        elif not (util < th.sync_util_below_pct and held_share(split, rule) < th.sync_wait_below_share):
            continue  # a thread that only waits has nothing to overlap: the GPU is the bottleneck
        # the line holding most of the rule's largest category, and the loop around it
        line = split.line_of(max(HELD_BY[rule], key=lambda c: split.shares[c])) or {}
        where = f" at line {line['line']} `{line['text']}`" if line else ""
        if (loop := line.get("loop")) and loop[0] != line["line"]:
            where += f" in the loop at line {loop[0]} `{loop[1]}`"
        evidence = {**figures, "window_s": span, "shares": {c: round(s, 3) for c, s in split.shares.items()},
                    "line": line.get("line"), "line_text": line.get("text")}
        text, hint = BOUND[rule]
        message = text.format(gpu=dev.key, util=util, share=100 * held_share(split, rule), where=where,
                              span=span, **words)
        out.append(Finding(rule, dev.key, "warning", message, hint, evidence))
    return out


def idle(ctx: Context) -> list[Finding]:
    """Utilisation and CPU both low while a cell runs: the code waits (I/O, sync, sleep)."""
    th, out = ctx.thresholds, []
    span = th.idle_window_s
    for dev in ctx.used_gpus():
        end = ctx.window.end(dev.key, "util_pct")  # the CPU and the cell over the same seconds
        if th.idle_only_in_cell and ctx.in_cell_s - (ctx.now - end) < span:
            continue
        cpu = ctx.window.mean(HOST_KEY, "proc_cpu_pct", span, end)
        util = ctx.window.mean(dev.key, "util_pct", span, end)
        if not (cpu < th.idle_cpu_below_pct and util < th.idle_util_below_pct):
            continue
        during = "while a cell runs, " if ctx.in_cell_s else ""
        message = (f"GPU {dev.key} idle ({util:.0f} % busy) and this kernel's CPU at {cpu:.0f} % "
                   f"{during}over {span:.0f} s: the code is waiting on something")
        out.append(Finding("idle", dev.key, "info", message, IDLE_HINT, {
            "util_pct": round(util, 1), "proc_cpu_pct": round(cpu, 1), "window_s": span,
            "in_cell_s": round(ctx.in_cell_s - (ctx.now - end), 1)}))  # by the window's end
    return out


def fmt_gpus(keys: list) -> str:
    """GPU keys as text with ranges: [0, 1, 2, 5] -> "0–2, 5"."""
    parts = []
    ints = sorted(k for k in keys if isinstance(k, int))
    for _, run in itertools.groupby(enumerate(ints), lambda pair: pair[1] - pair[0]):
        run = [k for _, k in run]
        parts.append(f"{run[0]}–{run[-1]}" if len(run) >= 3 else ", ".join(map(str, run)))
    parts += [str(k) for k in keys if not isinstance(k, int)]
    return ", ".join(parts)


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
    busy = [g for g in means if g not in lagging]  # never empty: the busiest GPU lags no one
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


THERMAL_BITS = 0x8 | 0x20 | 0x40 | 0x80  # hw_slowdown, sw_thermal, hw_thermal, hw_power_brake
THERMAL_HINT = ("The card lowers its clocks to protect itself: check airflow, fans and the room or "
                "rack temperature (nvidia-smi -q -d PERFORMANCE,TEMPERATURE shows why).")
POWER_HINT = ("The card runs at its power limit, which is expected under heavy load; it clocks lower "
              "to stay under it. nvidia-smi -q -d POWER shows the limit (an admin can change it).")
THIN_HINT = ("Utilisation only says a kernel was running, not how much of the GPU it used. Give each "
             "kernel more work: larger batches, fused operations (torch.compile), CUDA graphs for "
             "launch-bound loops, mixed precision.")


def throttling(ctx: Context) -> list[Finding]:
    """Clock-event reasons (power cap, thermal, hardware), heat near slowdown, power pinned."""
    th, out = ctx.thresholds, []
    span, least = th.throttle_window_s, th.throttle_min_share
    for dev in ctx.gpus():
        gpu, parts, evidence, thermal = dev.key, [], {"window_s": span}, False
        if (got := ctx.window.recent(gpu, "clock_event_reasons", span)) is not None:
            bits = got[1].astype(np.int64)
            if float(np.mean((bits & THROTTLE_BITS) != 0)) >= least:  # then each reason's share
                shares = {b: float(np.mean((bits & b) != 0))
                          for b in CLOCK_EVENT_REASONS if b & THROTTLE_BITS}
                named = {CLOCK_EVENT_REASONS[b]: round(s, 2) for b, s in shares.items() if s > 0}
                thermal = any(b & THERMAL_BITS and s >= least for b, s in shares.items())
                parts.append("clock-event reasons " + ", ".join(
                    f"{n} ({100 * s:.0f} % of readings)" for n, s in named.items()))
                evidence["reasons"] = named
        slowdown = dev.slowdown_temp_c or math.nan  # (no slowdown temperature: no read)
        near = slowdown - th.throttle_temp_margin_c
        if slowdown > 0 and (temp := ctx.window.mean(gpu, "temp_c", span)) >= near:
            thermal = True
            parts.append(f"temperature {temp:.0f} °C, {slowdown - temp:.0f} °C from its slowdown "
                         f"threshold ({slowdown:.0f} °C)")
            evidence.update(temp_c=round(temp, 1), slowdown_temp_c=slowdown)
        limit = dev.power_limit_w or math.nan
        if (got := ctx.window.recent(gpu, "power_w", span)) is not None and limit > 0:
            pinned = float(np.mean(got[1] >= th.throttle_power_fraction * limit))
            if pinned >= th.throttle_power_share:
                watts = float(np.mean(got[1]))
                parts.append(f"power {watts:.0f} W pinned at its {limit:.0f} W limit "
                             f"({100 * pinned:.0f} % of readings)")
                evidence.update(power_w=round(watts, 1), power_limit_w=limit, pinned_share=round(pinned, 2))
        if not parts:
            continue
        if not math.isnan(clock := ctx.window.mean(gpu, "sm_clock_mhz", span)):
            evidence["sm_clock_mhz"] = round(clock)
        kind = "thermal" if thermal else "power"
        message = f"GPU {gpu} is throttling ({kind}) over {span:.0f} s: " + "; ".join(parts)
        out.append(Finding("throttling", gpu, "warning" if thermal else "info", message,
                           THERMAL_HINT if thermal else POWER_HINT, evidence))
    return out


def busy_thin(ctx: Context) -> list[Finding]:
    """Utilisation high while GPM says few SMs are active or occupied: kernels too small."""
    th, out = ctx.thresholds, []
    span = th.thin_window_s
    for dev in ctx.gpus():
        gpu = dev.key
        end = ctx.window.end(gpu, "util_pct", "sm_active_pct")  # both over the same seconds
        active = ctx.window.mean(gpu, "sm_active_pct", span, end)
        occupancy = ctx.window.mean(gpu, "sm_occupancy_pct", span, end)
        util = ctx.window.mean(gpu, "util_pct", span, end)  # without GPM both are NaN: never thin
        if not (util >= th.thin_util_above_pct
                and (active < th.thin_sm_active_below_pct or occupancy < th.thin_occupancy_below_pct)):
            continue
        occ = "" if math.isnan(occupancy) else f", SM occupancy {occupancy:.0f} %"
        message = (f"GPU {gpu} looks busy (utilisation {util:.0f} %) but its SMs are mostly unused "
                   f"(SM activity {active:.0f} %{occ}) over {span:.0f} s: kernels too small to fill it")
        out.append(Finding("busy_thin", gpu, "info", message, THIN_HINT, {
            "util_pct": round(util, 1), "sm_active_pct": round(active, 1),
            "sm_occupancy_pct": None if math.isnan(occupancy) else round(occupancy, 1),
            "window_s": span}))
    return out
