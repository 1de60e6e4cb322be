"""Memory rules: OOM risk (memory nearly full) and memory creep (a leak, with the names holding it)."""

from __future__ import annotations

import math
import re
import time

import numpy as np

from .. import holders
from ..peaks import allocator_now, fold_peak
from ..sources.base import Device
from ..units import fmt_bytes
from .alerts import Finding
from .window import Context, held_for, median

OOM_HINT = ("Free what you no longer need (del the tensors, then torch.cuda.empty_cache()), lower the "
            "batch size, use mixed precision or gradient checkpointing; "
            "nbgpu.diagnostics.memory_owners(sampler) shows whose memory it is.")
# A mark-based leak ends when no mark came for this many mark spacings (at least the seconds).
MARKS_STOPPED_SPACINGS = 3.0
MARKS_STOPPED_MIN_S = 20.0
HOLDERS_EVERY_S = 30.0  # a leak's holders are named from a walk at most this often
LEAK_HINT = ("Something keeps GPU tensors alive: a list of losses or outputs kept with their graph "
             "(store loss.item() or .detach().cpu() instead), a growing cache, tensors in global "
             "variables. Compare torch.cuda.memory_allocated() across epochs. If a model or data "
             "set is being loaded, this stops on its own.")


def _total_bytes(ctx: Context, dev: Device) -> float:
    total = math.nan if dev.mem_total_bytes is None else float(dev.mem_total_bytes)
    if not (total and total > 0):
        _, v = ctx.window.series(dev.key, "mem_total_bytes", 60.0)
        total = float(v[-1]) if len(v) else math.nan
    return total


def _fresh_allocator_peaks(ctx: Context, allocator: dict) -> dict:
    """The allocator's figures with its high-water mark kept only where it rose since the last
    look (else it may be from long before this window: reserved-now stands in)."""
    seen = ctx.memo.setdefault("allocator_peak_bytes", {})
    out = {}
    for key, fig in allocator.items():
        peak = fig.get("peak_reserved_bytes", math.nan)
        rose = key in seen and peak > seen[key]
        seen[key] = peak
        out[key] = fig if rose else dict(fig, peak_reserved_bytes=fig.get("reserved_start_bytes", math.nan))
    return out


def oom_risk(ctx: Context) -> list[Finding]:
    """Memory above 90 % of the card for a moment (warning), above 95 % for 10 s (critical); a
    PyTorch allocator peak reached since the last look, between NVML's samples, counts too."""
    th, out = ctx.thresholds, []
    span = max(th.oom_warning_after_s, th.oom_critical_after_s) + 5.0
    allocator = _fresh_allocator_peaks(ctx, allocator_now(ctx.gpus()))
    for dev in ctx.gpus(whole_only=False):
        gpu = dev.key
        t, used = ctx.window.series(gpu, "mem_used_bytes", span)
        total = _total_bytes(ctx, dev)
        if len(t) < 2 or not total > 0 or t[-1] < ctx.now - ctx.window.stale_after_s:
            continue
        frac = used / total
        crit_s = held_for(t, frac > th.oom_critical_fraction, ctx.now)
        warn_s = held_for(t, frac > th.oom_warning_fraction, ctx.now)
        critical = crit_s >= th.oom_critical_after_s
        severity, level, held = (("critical", th.oom_critical_fraction, crit_s) if critical
                                 else ("warning", th.oom_warning_fraction, warn_s))
        # a cell that ends with the card full is no spike freed again, however short it was
        if critical or warn_s >= th.oom_warning_after_s or (ctx.cell_end and frac[-1] > level):
            shown, peak_bytes, source = float(frac[-1]), float(used.max()), "nvml"
            message = (f"GPU {gpu} memory at {100 * shown:.0f} % ({fmt_bytes(used[-1])} of "
                       f"{fmt_bytes(total)}), above {100 * level:.0f} % for {held:.0f} s: "
                       "the next allocation may fail with CUDA out of memory")
        else:  # NVML's samples can miss an allocation freed between two reads; the allocator does not
            peak = fold_peak(float(used.max()), float(used[-1]), allocator.get(gpu))
            if peak.source != "allocator" or not peak.bytes / total > level:
                continue
            shown, peak_bytes, source, held = peak.bytes / total, peak.bytes, "allocator", 0.0
            message = (f"GPU {gpu} memory peaked at {100 * shown:.0f} % ({fmt_bytes(peak.bytes)} of "
                       f"{fmt_bytes(total)}) by PyTorch's allocator, above {100 * level:.0f} %, between "
                       "NVML's samples: the same step may fail with CUDA out of memory next time")
        out.append(Finding("oom_risk", gpu, severity, message, OOM_HINT, {
            "mem_used_bytes": float(used[-1]), "mem_peak_bytes": peak_bytes, "mem_peak_source": source,
            "mem_total_bytes": float(total), "used_fraction": round(shown, 4), "above_fraction": level,
            "held_s": round(held, 1)}))
    return out


def _segments_rising(t: np.ndarray, v: np.ndarray, t0: float, t1: float, n: int) -> float | None:
    """Rise from the first to the last of ``n`` time slices if every slice beats the last and the
    last is still rising in its second half (not a finished warm-up)."""
    cuts = np.searchsorted(t, np.linspace(t0, t1, n + 1)[:-1], "left")  # t is sorted
    parts = np.split(v[cuts[0]:], cuts[1:] - cuts[0])
    if not all(len(p) for p in parts):
        return None
    medians = [median(p) for p in parts]
    total = medians[-1] - medians[0]
    if total <= 0 or (np.diff(medians) < 0.25 * total / (n - 1)).any():
        return None
    last, half = parts[-1], len(parts[-1]) // 2
    if half < 1 or median(last[half:]) - median(last[:half]) < total / (n - 1) / 8:
        return None
    return total


def _trend_leak(ctx: Context, gpu: object) -> dict | None:
    th = ctx.thresholds
    _, held = ctx.window.series(gpu, "mem_used_bytes", max(th.leak_windows_s))
    if not len(held) or float(held.max() - held.min()) < th.leak_min_growth_bytes:
        return None  # a window's rise (median to median) is within its range: none can report
    n = th.leak_segments
    for span in th.leak_windows_s:
        if (got := ctx.window.recent(gpu, "mem_used_bytes", span)) is None:
            continue
        t, v = got
        if (rise := _segments_rising(t, v, ctx.now - span, ctx.now, n)) is None:
            continue
        per_min = rise / (span * (n - 1) / n) * 60.0
        if rise >= th.leak_min_growth_bytes and per_min >= th.leak_min_rate_bytes_per_min:
            return {"window_s": span, "rise_bytes": rise, "rate_bytes_per_min": per_min,
                    "mem_used_bytes": float(v[-1])}
    return None


def _unit_of(labels: list[str]) -> str:
    """The word the marks share ("epoch 3", "epoch 4" -> "epoch"), else "mark"."""
    words = [m.group(0).lower() if (m := re.match(r"[A-Za-z_]+", lab.strip())) else None
             for lab in labels]
    return words[0] if None not in words and len(set(words)) == 1 else "mark"


def _mark_leak(ctx: Context, gpu: object) -> dict | None:
    th = ctx.thresholds
    marks = ctx.marks[-th.leak_marks:]
    if len(marks) < th.leak_marks:
        return None
    cache, key = ctx.memo.setdefault("marks", {}), (gpu, tuple(m[0] for m in marks))
    if key not in cache:
        cache[key] = _rise_at_marks(ctx, gpu, marks)
    if (found := cache[key]) is None:
        return None
    spacing = (marks[-1][0] - marks[0][0]) / (len(marks) - 1)
    if ctx.now - marks[-1][0] > max(MARKS_STOPPED_SPACINGS * spacing, MARKS_STOPPED_MIN_S):
        return None  # the loop stopped marking: it ended
    _, v = ctx.window.series(gpu, "mem_used_bytes", 5.0)
    if len(v) and float(v[-1]) < found["mem_used_bytes"] - 0.5 * found["per_mark_bytes"]:
        return None  # the memory fell back: it was freed
    return found


def _rise_at_marks(ctx: Context, gpu: object, marks: list[tuple[float, str]]) -> dict | None:
    """Memory at each mark, if it rose at every one (the figures of a mark-based leak)."""
    th = ctx.thresholds
    t, v = ctx.window.store.series(gpu, "mem_used_bytes", marks[0][0] - 5.0, marks[-1][0] + 0.001)
    at = []
    for tm, _ in marks:
        sel = v[(t <= tm + 0.001) & (t >= tm - 2.0)]
        if not len(sel):
            return None
        at.append(median(sel[-3:]))
    steps = np.diff(at)
    mean_step = float(np.mean(steps))
    if not (mean_step >= th.leak_min_per_mark_bytes and (steps >= 0.5 * mean_step).all()):
        return None
    span = marks[-1][0] - marks[0][0]
    return {"per_mark_bytes": mean_step, "unit": _unit_of([m[1] for m in marks]),
            "marks": [m[1] for m in marks], "mem_at_marks_bytes": at,
            "rate_bytes_per_min": (at[-1] - at[0]) / span * 60.0 if span > 0 else math.nan,
            "mem_used_bytes": at[-1], "marks_from_s": marks[0][0]}


def memory_leak(ctx: Context) -> list[Finding]:
    """Memory rising at every mark (epoch), or steadily through a window, never falling back."""
    out = []
    for dev in ctx.gpus(whole_only=False):
        gpu = dev.key
        by_mark, trend = _mark_leak(ctx, gpu), _trend_leak(ctx, gpu)
        if by_mark is None and trend is None:
            continue
        if by_mark is not None:
            n = len(by_mark["marks"])
            rate = f"+{fmt_bytes(by_mark['per_mark_bytes'])} per {by_mark['unit']}"
            message = (f"GPU {gpu} memory rose at each of the last {n} {by_mark['unit']}s: {rate} "
                       f"(now {fmt_bytes(by_mark['mem_used_bytes'])})")
            evidence = dict(by_mark, method="marks")
        else:
            rate = f"+{fmt_bytes(trend['rate_bytes_per_min'])} per minute"
            message = (f"GPU {gpu} memory rising steadily: {rate}, +{fmt_bytes(trend['rise_bytes'])} "
                       f"over the last {trend['window_s']:.0f} s without falling back "
                       f"(now {fmt_bytes(trend['mem_used_bytes'])})")
            evidence = dict(trend, method="trend")
        evidence["rate"] = rate
        hint = LEAK_HINT
        if names := _holders_now(ctx, dev):
            evidence["holders"] = names
            hint = (f"Held most by {'; '.join(names)} (`%gpumon memory` lists every name, "
                    f"`%gpumon free NAME` releases one). {LEAK_HINT}")
        out.append(Finding("memory_leak", gpu, "warning", message, hint, evidence))
    return out


def _holders_now(ctx: Context, dev: Device) -> list[str]:
    """The names holding most of ``dev``'s memory in this process, walked at most every
    ``HOLDERS_EVERY_S``; none for a replayed recording (judged at another time than now)."""
    if abs(ctx.now - time.time()) > HOLDERS_EVERY_S:
        return []
    memo = ctx.memo.setdefault("leak_holders", {})
    at, names = memo.get(dev.key, (-math.inf, []))
    if abs(ctx.now - at) >= HOLDERS_EVERY_S:
        device = holders.cuda_device(dev.uuid)
        names = [holders.holder_line(r) for r in holders.top_holders(device)[0]] if device else []
        memo[dev.key] = (ctx.now, names)
    return names
