"""A device's readings around a block, merged and NaN-free; the energy of a block of time, and the
straight-line arithmetic every summary figure uses."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..metrics import BY_NAME

if TYPE_CHECKING:
    import pandas as pd

    from ..timeline import Timeline

# The metrics a summary reads (``summary._gpu_row``); other metrics are never merged.
SUMMARY_METRICS = ("mem_used_bytes", "util_pct", "power_w", "sm_active_pct", "temp_c", "energy_j",
                   "clock_event_reasons")
MAX_SUFFIXES = ("_max_w", "_max_pct", "_max_bytes")  # a folded frame's per-tick maxima
# How far before the block a stream's reading may lie to show that the block is not bucketed.
WITNESS_S = 15.0

EMPTY = (np.empty(0), np.empty(0))


@dataclass
class Readings:
    """One device's readings near a block [t0, t1]: NaN-free, time-sorted series per metric,
    and whether the block holds 10 s buckets of the store's coarse history."""

    merged: dict[str, tuple[np.ndarray, np.ndarray]]
    bucketed: bool

    @classmethod
    def of_frame(cls, df: pd.DataFrame, times: np.ndarray, t0: float, t1: float) -> Readings:
        order = np.argsort(times, kind="stable")
        t, merged = times[order], {}
        for c in df.columns:
            if c in BY_NAME or c.endswith(MAX_SUFFIXES):
                v = df[c].to_numpy(dtype=np.float64, na_value=np.nan)[order]
                merged[c] = (t[v == v], v[v == v])
        dec = (df["decimated"].fillna(False).to_numpy(dtype=bool)[order] if "decimated" in df.columns
               else np.zeros(len(df), dtype=bool))
        return cls(merged, bool(dec[(t >= t0) & (t <= t1)].any()))

    def series(self, metric: str, a: float = -math.inf, b: float = math.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of ``metric`` in [a, b] (all it was read for by default)."""
        t, v = self.merged.get(metric, EMPTY)
        i, j = int(t.searchsorted(a, "left")), int(t.searchsorted(b, "right"))
        return t[i:j], v[i:j]


def timeline_readings(full: Timeline, gpus: list, a: float, b: float, t0: float, t1: float
                      ) -> list[Readings]:
    """The ``Readings`` of each of ``gpus`` over [a, b] for the block [t0, t1], read in one pass."""
    store = full.store
    per_pair = store.series_many([(g, m) for g in gpus for m in SUMMARY_METRICS], a, b)
    out, n = [], len(SUMMARY_METRICS)
    for i, g in enumerate(gpus):
        merged = dict(zip(SUMMARY_METRICS, per_pair[i * n:(i + 1) * n], strict=True))
        # buckets are older than every full-resolution row: a stream with such rows just before
        # t0 holds none in the block, and only the others are read over the block
        bucketed = any(not len(store.read_stream(g, s, t0 - WITNESS_S, t0, coarse=False)[0])
                       and store.read_stream(g, s, t0, t1)[2].any() for s in store.streams_of(g))
        out.append(Readings(merged, bucketed))
    return out


# How far outside the range a reading may lie and still stand for the value at the edge.
EDGE_SLACK_S = 5.0

# Update periods of the energy counter and of the power sample buffer, measured on an H200
# (driver 580) by scripts/gpu/nvml_periods.py.
RESOLUTION_PERIODS_S = {"energy_period_s": 0.1, "power_period_s": 0.02}
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
    """Index of the sample nearest ``at`` (the earlier one on a tie) if within ``slack`` seconds."""
    i = int(np.abs(t - at).argmin()) if len(t) else None
    return i if i is not None and abs(float(t[i]) - at) <= slack else None


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
