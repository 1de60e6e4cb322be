"""Card rules: throttling (clock-event reasons, heat, power cap) and busy-but-thin (GPM)."""

from __future__ import annotations

import math

import numpy as np

from ..metrics import CLOCK_EVENT_REASONS, THROTTLE_BITS
from .alerts import Finding
from .window import Context

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
    span = th.throttle_window_s
    for dev in ctx.gpus():
        gpu, parts, evidence, thermal = dev.key, [], {"window_s": span}, False
        got = ctx.window.recent(gpu, "clock_event_reasons", span)
        if got is not None:
            bits = got[1].astype(np.int64)
            share = float(np.mean((bits & THROTTLE_BITS) != 0))
            if share >= th.throttle_min_share:
                named = {}
                for bit, name in CLOCK_EVENT_REASONS.items():
                    s = float(np.mean((bits & bit) != 0))
                    if bit & THROTTLE_BITS and s > 0:
                        named[name] = round(s, 2)
                        thermal |= bool(bit & THERMAL_BITS) and s >= th.throttle_min_share
                parts.append("clock-event reasons " + ", ".join(
                    f"{n} ({100 * s:.0f} % of readings)" for n, s in named.items()))
                evidence["reasons"] = named
        slowdown = math.nan if dev.slowdown_temp_c is None else dev.slowdown_temp_c
        temp = ctx.window.mean(gpu, "temp_c", span)
        if slowdown > 0 and temp >= slowdown - th.throttle_temp_margin_c:
            thermal = True
            parts.append(f"temperature {temp:.0f} °C, {slowdown - temp:.0f} °C from its slowdown "
                         f"threshold ({slowdown:.0f} °C)")
            evidence.update(temp_c=round(temp, 1), slowdown_temp_c=slowdown)
        limit = math.nan if dev.power_limit_w is None else dev.power_limit_w
        got = ctx.window.recent(gpu, "power_w", span)
        if got is not None and limit > 0:
            pinned = float(np.mean(got[1] >= th.throttle_power_fraction * limit))
            if pinned >= th.throttle_power_share:
                parts.append(f"power {np.mean(got[1]):.0f} W pinned at its {limit:.0f} W limit "
                             f"({100 * pinned:.0f} % of readings)")
                evidence.update(power_w=round(float(np.mean(got[1])), 1), power_limit_w=limit,
                                pinned_share=round(pinned, 2))
        if not parts:
            continue
        clock = ctx.window.mean(gpu, "sm_clock_mhz", span)
        if not math.isnan(clock):
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
        if math.isnan(active) and math.isnan(occupancy):
            continue
        util = ctx.window.mean(gpu, "util_pct", span, end)
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
