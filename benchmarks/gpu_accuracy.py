"""Benchmarks 2 and 3 on a real GPU: resolution of the timeline, energy, utilisation and peak
memory of a block, each against an independent reference read in the same run."""

from __future__ import annotations

import math
import time

import numpy as np

from .gpu_loops import ComputeBound
from .registry import Context
from .report import Outcome, Target
from .stats import median, median_spacing_s

POWER_SPACING_TARGET_S = 0.025
UTIL_SPACING_TARGET_S = 0.25
ENERGY_TARGET_PCT = 2.0
DUTY_TARGET_POINTS = 10.0
SETTLE_S = 1.0  # after a block, let the sampler drain NVML's buffers past its end
_trapezoid = getattr(np, "trapezoid", None) or np.trapz  # numpy < 2 has only trapz


def _sampler(**kw):
    import nbgpu

    return nbgpu.Sampler(**kw).start()


def sampler_facts(sampler) -> dict:
    """What the sampler says about its run: ticks, errors, the device it read."""
    return {"ticks": sampler.ticks, "errors": sampler.errors, "last_error": sampler.last_error,
            "source": sampler.source.describe(), "interval_s": sampler.interval}


def _run_for(loop, seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        loop.step()
    loop.timed(0)


def run_resolution(ctx: Context) -> Outcome:
    """Median spacing of power and utilisation points while a compute loop runs, at defaults."""
    seconds = 3.0 if ctx.quick else 8.0
    loop = ComputeBound(["cuda:0"])
    sampler = _sampler()
    try:
        time.sleep(1.0)
        t0 = time.time()
        _run_for(loop, seconds)
        t1 = time.time()
        time.sleep(SETTLE_S)
    finally:
        sampler.stop()
    raw: dict = {"interval_s": sampler.interval, "window_s": t1 - t0, "per_gpu": {},
                 "sampler": sampler_facts(sampler)}
    for dev in sampler.devices:
        g = dev.key
        per = {}
        for metric in ("power_w", "util_pct", "mem_used_bytes"):
            t, _ = sampler.timeline.between(t0, t1).series(g, metric)
            per[metric] = {"points": len(t), "median_spacing_s": median_spacing_s(t),
                           "max_spacing_s": float(np.max(np.diff(t))) if len(t) > 1 else math.nan}
        raw["per_gpu"][str(g)] = per
    g0 = raw["per_gpu"][str(sampler.devices[0].key)]
    out = Outcome(raw=raw)
    out.targets.append(Target("power point spacing (median)", g0["power_w"]["median_spacing_s"] * 1000,
                              "ms", "<=", POWER_SPACING_TARGET_S * 1000))
    out.targets.append(Target("utilisation point spacing (median)",
                              g0["util_pct"]["median_spacing_s"] * 1000, "ms", "<=",
                              UTIL_SPACING_TARGET_S * 1000))
    out.figure("memory point spacing (median)", g0["mem_used_bytes"]["median_spacing_s"] * 1000, "ms")
    return out


def _energy_mj(handle) -> int:
    import pynvml

    return pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)


def integrate_j(t: np.ndarray, p: np.ndarray, t0: float, t1: float) -> float:
    """Trapezoid integral of power over [t0, t1], the series extended flat to both edges."""
    if len(t) == 0:
        return math.nan
    grid = np.concatenate([[t0], t[(t > t0) & (t < t1)], [t1]])
    return float(_trapezoid(np.interp(grid, t, p), grid))


def run_energy(ctx: Context) -> Outcome:
    """Energy of a bursty block: nbgpu's capture (or the power timeline) vs NVML's counter delta."""
    import pynvml

    import nbgpu

    bursts = 3 if ctx.quick else 6
    loop = ComputeBound(["cuda:0"])
    sampler = _sampler(gpus=[0])
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        time.sleep(1.0)
        capture = getattr(nbgpu, "capture", None)
        cap = capture(sampler=sampler) if capture is not None else None
        if cap is not None:
            cap.__enter__()
        e0, t0 = _energy_mj(handle), time.time()
        for _ in range(bursts):  # 0.5 s busy, 0.5 s idle: power moves, integration has work to do
            _run_for(loop, 0.5)
            time.sleep(0.5)
        e1, t1 = _energy_mj(handle), time.time()
        if cap is not None:
            cap.__exit__(None, None, None)
        time.sleep(SETTLE_S)
    finally:
        sampler.stop()
        pynvml.nvmlShutdown()
    ref_j = (e1 - e0) / 1000.0
    t, p = sampler.timeline.series(0, "power_w")
    own_j = integrate_j(t, p, t0, t1)
    raw = {"sampler": sampler_facts(sampler),
           "reference_counter_j": ref_j, "block_s": t1 - t0, "timeline_integral_j": own_j,
           "power_points_in_block": int(((t >= t0) & (t <= t1)).sum())}
    out = Outcome(raw=raw)
    if cap is not None:
        row = cap.summary.iloc[0]
        raw["capture_energy_j"] = float(row["energy_j"])
        raw["capture_energy_source"] = str(row.get("energy_source", ""))
        raw["capture_window_s"] = cap.end_time - cap.start_time
        out.targets.append(Target("nbgpu.capture energy vs NVML counter delta",
                                  100 * abs(raw["capture_energy_j"] - ref_j) / ref_j, "% error", "<=",
                                  ENERGY_TARGET_PCT,
                                  note=f"capture energy source: {raw['capture_energy_source']}"))
    else:
        out.notes.append("nbgpu.capture() is not available in this tree: only the timeline integral "
                         "(computed by the benchmark) is compared.")
    out.targets.append(Target("power timeline integral vs NVML counter delta",
                              100 * abs(own_j - ref_j) / ref_j, "% error", "<=", ENERGY_TARGET_PCT,
                              note="trapezoid over nbgpu's power points, computed by the benchmark"))
    out.figure("block energy (NVML counter delta)", ref_j, "J")
    return out


def run_duty_cycle(ctx: Context) -> Outcome:
    """Utilisation of a ~50 % duty cycle (100 ms period) vs the busy fraction from CUDA events."""
    import torch

    seconds = 3.0 if ctx.quick else 6.0
    period_s = 0.1
    loop = ComputeBound(["cuda:0"])
    a, b, c = loop.mats[0]
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        torch.matmul(a, b, out=c)
    end.record()
    end.synchronize()
    per_ms = start.elapsed_time(end) / 20
    kernels = max(1, round(0.5 * period_s * 1000 / per_ms))
    sampler = _sampler(gpus=[0])
    busy_ms, periods = [], 0
    try:
        time.sleep(1.0)
        t0 = time.time()
        next_t = time.perf_counter()
        while time.time() - t0 < seconds:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
            for _ in range(kernels):
                torch.matmul(a, b, out=c)
            ev1.record()
            ev1.synchronize()
            busy_ms.append(ev0.elapsed_time(ev1))
            periods += 1
            next_t += period_s
            time.sleep(max(0.0, next_t - time.perf_counter()))
        t1 = time.time()
        time.sleep(SETTLE_S)
    finally:
        sampler.stop()
    true_pct = 100.0 * sum(busy_ms) / 1000.0 / (t1 - t0)
    edge = 0.3  # NVML's utilisation averages over its own window: skip points straddling the edges
    _, u = sampler.timeline.between(t0 + edge, t1 - edge).series(0, "util_pct")
    nb_pct = float(np.mean(u)) if len(u) else math.nan
    raw = {"sampler": sampler_facts(sampler),
           "kernels_per_period": kernels, "matmul_ms": per_ms, "periods": periods, "window_s": t1 - t0,
           "busy_ms_median": median(busy_ms), "true_busy_pct": true_pct, "nbgpu_util_mean_pct": nb_pct,
           "util_points": len(u), "util_values": [float(x) for x in u]}
    out = Outcome(raw=raw)
    out.targets.append(Target("utilisation error vs CUDA-event busy fraction", abs(nb_pct - true_pct),
                              "points", "<=", DUTY_TARGET_POINTS,
                              note=f"true {true_pct:.1f} %, nbgpu mean {nb_pct:.1f} %"))
    return out


def run_peak_memory(ctx: Context) -> Outcome:
    """Peak device memory of a block seen by nbgpu vs torch's reserved peak + what was there before."""
    import pynvml
    import torch

    import nbgpu

    hold_s = 0.8 if ctx.quick else 1.5
    torch.cuda.init()
    torch.cuda.empty_cache()
    dev = torch.device("cuda:0")
    torch.ones(1, device=dev)  # the context exists before the baseline is read
    sampler = _sampler(gpus=[0])
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        time.sleep(1.0)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        reserved0 = torch.cuda.memory_reserved(dev)
        nvml_used0 = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        capture = getattr(nbgpu, "capture", None)
        cap = capture(sampler=sampler) if capture is not None else None
        if cap is not None:
            cap.__enter__()
        t0 = time.time()
        x = torch.empty(2 * 2**30, dtype=torch.uint8, device=dev)
        time.sleep(hold_s)
        y = torch.empty(6 * 2**30, dtype=torch.uint8, device=dev)
        x.fill_(1)
        y.fill_(1)
        torch.cuda.synchronize()
        nvml_used_peak_direct = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        time.sleep(hold_s)
        del x, y
        torch.cuda.empty_cache()
        t1 = time.time()
        if cap is not None:
            cap.__exit__(None, None, None)
        max_reserved = torch.cuda.max_memory_reserved(dev)
        time.sleep(SETTLE_S)
    finally:
        sampler.stop()
        pynvml.nvmlShutdown()
    _, m = sampler.timeline.between(t0, t1).series(0, "mem_used_bytes")
    timeline_peak = float(np.max(m)) if len(m) else math.nan
    nb_peak = float(cap.summary.iloc[0]["mem_peak_bytes"]) if cap is not None else timeline_peak
    context_overhead = nvml_used0 - reserved0
    expected = context_overhead + max_reserved
    gib = 2**30
    raw = {"sampler": sampler_facts(sampler),
           "nvml_used_before_bytes": nvml_used0, "torch_reserved_before_bytes": reserved0,
           "context_and_others_bytes": context_overhead, "torch_max_reserved_bytes": max_reserved,
           "expected_peak_bytes": expected, "nbgpu_peak_bytes": nb_peak,
           "nbgpu_peak_from": "nbgpu.capture summary mem_peak_bytes" if cap is not None else
           "max of the timeline's mem_used_bytes (nbgpu.capture unavailable)",
           "timeline_peak_bytes": timeline_peak,
           "nvml_used_at_peak_direct_bytes": nvml_used_peak_direct, "mem_points_in_block": len(m),
           "hold_s": hold_s}
    out = Outcome(raw=raw)
    if cap is not None:
        cols = [c for c in cap.summary.columns if "mem" in c or c.startswith("torch_")]
        raw["capture_summary_memory"] = {c: cap.summary.iloc[0][c] for c in cols}
    out.figure("nbgpu peak memory", nb_peak / gib, "GiB")
    out.figure("torch max_memory_reserved + context and others", expected / gib, "GiB")
    out.figure("difference (nbgpu - expected)", (nb_peak - expected) / 2**20, "MiB")
    out.notes.append("NVML counts the whole device: the CUDA context, cuBLAS/cuDNN workspaces outside "
                     "torch's caching allocator and other processes; 'context and others' is NVML's "
                     "used memory minus torch's reserved memory just before the block. nbgpu reads "
                     "memory once per tick, so a peak shorter than the interval can be missed; the "
                     "block holds its peak for longer than that.")
    return out
