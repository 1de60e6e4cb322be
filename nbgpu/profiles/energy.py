"""Energy of a block of time, and the straight-line arithmetic every summary figure uses."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .readings import Readings

# How far outside the range a reading may lie and still stand for the value at the edge.
EDGE_SLACK_S = 5.0

# Update periods of the energy counter and of the power sample buffer, measured on an H200
# (driver 580) by scripts/gpu/nvml_periods.py.
RESOLUTION_PERIODS_S = {"energy_period_s": 0.1, "power_period_s": 0.02}
PERIODS_MEASURED = True
# A block shorter than period / TARGET_ERROR cannot be measured to TARGET_ERROR.
TARGET_ERROR = 0.02
# Below ten counter updates a block's energy comes from its power readings (50 of them at
# 20 ms), not from the energy counter, which over so few steps can be a whole step off.
COUNTER_MIN_S = 10 * RESOLUTION_PERIODS_S["energy_period_s"]


def line_knots(t: np.ndarray, v: np.ndarray, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray]:
    """The line through the readings over [t0, t1]: edge values interpolated, inner readings kept."""
    v0, v1 = np.interp((t0, t1), t, v).tolist()
    if t1 <= t0:
        return np.array([t0]), np.array([v0])
    inner = slice(int(t.searchsorted(t0, "right")), int(t.searchsorted(t1, "left")))
    return np.concatenate(([t0], t[inner], [t1])), np.concatenate(([v0], v[inner], [v1]))


def _trapz(tt: np.ndarray, vv: np.ndarray) -> float:
    return float(((tt[1:] - tt[:-1]) * (vv[1:] + vv[:-1]) / 2.0).sum())


def integrate_power_j(t: np.ndarray, p: np.ndarray, t0: float, t1: float) -> float:
    """Joules from power samples over [t0, t1]: trapezoids, first/last value held to the edges."""
    if t1 <= t0 or not len(t):
        return math.nan
    return _trapz(*line_knots(t, p, t0, t1))


def line_stats(tt: np.ndarray, vv: np.ndarray) -> tuple[float, float, float]:
    """(time-weighted mean, min, max) of a line through knots."""
    span = float(tt[-1] - tt[0])
    mean = _trapz(tt, vv) / span if span > 0 else float(vv.mean())
    return mean, float(vv.min()), float(vv.max())


def _nearest(t: np.ndarray, at: float, slack: float) -> int | None:
    """Index of the sample nearest ``at`` if within ``slack`` seconds, else None."""
    i = int(t.searchsorted(at))
    j = min((k for k in (i - 1, i) if 0 <= k < len(t)), key=lambda k: abs(float(t[k]) - at),
            default=None)  # the earlier one on a tie
    return j if j is not None and abs(float(t[j]) - at) <= slack else None


def block_energy_j(r: Readings, t0: float, t1: float) -> tuple[float, str]:
    pt, pv = r.series("power_w", t0 - EDGE_SLACK_S, t1 + EDGE_SLACK_S)
    if t1 - t0 < COUNTER_MIN_S and len(pt):
        # The counter moves in steps of its period: over a short block the power readings say more.
        return integrate_power_j(pt, pv, t0, t1), "power"
    et, ev = r.series("energy_j")  # the whole series: a copy's origin may lie far back
    keep = (np.diff(ev, prepend=np.nan) != 0) & (et >= t0 - EDGE_SLACK_S) & (et <= t1 + EDGE_SLACK_S)
    et, ev = et[keep], ev[keep]  # where the counter moved: a repeated value is a copy
    a, b = _nearest(et, t0, EDGE_SLACK_S), _nearest(et, t1, EDGE_SLACK_S)
    if a is not None and b is not None and b > a and ev[b] >= ev[a]:
        joules = float(ev[b] - ev[a])
        if len(pt):
            # Move each counter reading to the edge with the power over the part between.
            joules += _signed_power_j(pt, pv, t0, float(et[a]))
            joules += _signed_power_j(pt, pv, float(et[b]), t1)
            return max(joules, 0.0), "counter"
        if abs(et[a] - t0) < 0.05 and abs(et[b] - t1) < 0.05:
            return joules, "counter"
    if len(pt):
        return integrate_power_j(pt, pv, t0, t1), "power"
    return math.nan, "none"


def _signed_power_j(t: np.ndarray, p: np.ndarray, a: float, b: float) -> float:
    """Integrated power from a to b; negative when b < a."""
    return 0.0 if a == b else math.copysign(integrate_power_j(t, p, min(a, b), max(a, b)), b - a)
