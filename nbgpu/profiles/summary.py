"""Turn the readings of a time range into a per-GPU summary: what that block did to each card.

Everything here reads the store; nothing calls NVML. Energy comes from the card's energy
counter where it has one (the delta between the readings nearest the edges, corrected at
each edge with integrated power), otherwise from integrating power over the range.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..metrics import CLOCK_EVENT_REASONS, THROTTLE_BITS
from ..store import merge_series

if TYPE_CHECKING:
    import pandas as pd

    from ..timeline import Timeline

# How far outside the range a reading may lie and still stand for the value at the edge.
EDGE_SLACK_S = 5.0
COARSE_SPACING_S = 1.0

LEAD_COLUMNS = ("label", "iteration", "mark")
SUMMARY_COLUMNS = (
    "gpu", "name", "status", "start", "end", "duration_s", "samples",
    "mem_start_bytes", "mem_end_bytes", "mem_peak_bytes", "mem_delta_bytes",
    "util_mean_pct", "util_max_pct", "sm_active_mean_pct",
    "power_mean_w", "power_max_w", "energy_j", "energy_source", "temp_max_c",
    "throttle_reasons", "throttle_s", "resolution_note",
)


def _is_mig(gpu: object) -> bool:
    return isinstance(gpu, str) and "/" in gpu


def selected(gpu: object, gpus: list | None) -> bool:
    """Whether device ``gpu`` is among ``gpus`` (None: all); a MIG slice follows its parent."""
    if gpus is None or gpu in gpus:
        return True
    return isinstance(gpu, str) and "/" in gpu and gpu.split("/")[0] in {str(g) for g in gpus}


def integrate_power_j(t: np.ndarray, p: np.ndarray, t0: float, t1: float) -> float:
    """Joules from power samples over [t0, t1]: trapezoids, first/last value held to the edges."""
    if t1 <= t0 or not len(t):
        return math.nan
    inside = (t > t0) & (t < t1)
    # Value at each edge: interpolated between the samples around it, or the nearest one.
    p0 = float(np.interp(t0, t, p))
    p1 = float(np.interp(t1, t, p))
    tt = np.concatenate([[t0], t[inside], [t1]])
    pp = np.concatenate([[p0], p[inside], [p1]])
    return float(np.sum((tt[1:] - tt[:-1]) * (pp[1:] + pp[:-1]) / 2.0))


def _nearest(t: np.ndarray, at: float, slack: float) -> int | None:
    """Index of the sample nearest ``at`` if within ``slack`` seconds, else None."""
    if not len(t):
        return None
    i = int(np.searchsorted(t, at))
    best = [j for j in (i - 1, i) if 0 <= j < len(t)]
    j = min(best, key=lambda k: abs(t[k] - at))
    return j if abs(t[j] - at) <= slack else None


class _Readings:
    """One device's rows over [a, b], read once per stream; ``series`` slices them."""

    def __init__(self, full: Timeline, gpu: object, a: float, b: float) -> None:
        store = full.store
        self.streams = []
        for stream in store.streams_of(gpu):
            t, cols, decimated = store.read_stream(gpu, stream, a, b)
            self.streams.append((t, cols, decimated))

    def series(self, metric: str, a: float = -math.inf, b: float = math.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of ``metric`` in [a, b], NaN dropped, sorted by time."""
        parts_t, parts_v = [], []
        for t, cols, _ in self.streams:
            if metric not in cols:
                continue
            v = cols[metric].astype(np.float64)
            ok = (t >= a) & (t <= b) & ~np.isnan(v)
            parts_t.append(t[ok])
            parts_v.append(v[ok])
        return merge_series(parts_t, parts_v)

    def decimated(self, a: float, b: float) -> bool:
        """Whether any row in [a, b] is a bucket of the store's coarse history."""
        return any(bool(d[(t >= a) & (t <= b)].any()) for t, _, d in self.streams)


def energy_j(full: Timeline, t0: float, t1: float, gpu: object,
             readings: _Readings | None = None) -> tuple[float, str]:
    """(joules over [t0, t1], "counter" | "power" | "none") for one GPU."""
    r = readings or _Readings(full, gpu, t0 - EDGE_SLACK_S, t1 + EDGE_SLACK_S)
    pt, pv = r.series("power_w", t0 - EDGE_SLACK_S, t1 + EDGE_SLACK_S)
    et, ev = r.series("energy_j", t0 - EDGE_SLACK_S, t1 + EDGE_SLACK_S)
    a, b = _nearest(et, t0, EDGE_SLACK_S), _nearest(et, t1, EDGE_SLACK_S)
    if a is not None and b is not None and b > a and ev[b] >= ev[a]:
        joules = float(ev[b] - ev[a])
        if len(pt):
            # Move each counter reading to the edge: add power over the part it missed,
            # subtract power over the part outside the range.
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
    if a == b:
        return 0.0
    if a < b:
        return integrate_power_j(t, p, a, b)
    return -integrate_power_j(t, p, b, a)


def _edge_value(r: _Readings, metric: str, at: float, before: bool) -> float:
    """The reading that stands for ``metric`` at ``at``: the newest at or before it (``before``)
    or the first at or after it, within the edge slack; NaN if none."""
    if before:
        _t, v = r.series(metric, at - EDGE_SLACK_S, at)
        return float(v[-1]) if len(v) else math.nan
    _t, v = r.series(metric, at, at + EDGE_SLACK_S)
    return float(v[0]) if len(v) else math.nan


def _throttle(t: np.ndarray, bits: np.ndarray, t0: float, t1: float) -> tuple[str, float]:
    """("reason 1.2s, reason 0.4s", seconds with any throttling bit) over [t0, t1].

    Each reading holds until the next one (the last one until ``t1``).
    """
    if not len(t):
        return "", math.nan
    starts = np.clip(t, t0, t1)
    ends = np.clip(np.r_[t[1:], t1], t0, t1)
    held = np.maximum(ends - starts, 0.0)
    if not held.sum() and len(t):  # a single reading in a very short range
        held = np.full(len(t), (t1 - t0) / len(t))
    ints = np.nan_to_num(bits, nan=0).astype(np.int64)
    seen = []
    for bit, name in CLOCK_EVENT_REASONS.items():
        if not bit & THROTTLE_BITS:
            continue
        s = float(held[(ints & bit) != 0].sum())
        if (ints & bit).any():
            seen.append(f"{name} {s:.1f}s")
    return ", ".join(seen), float(held[(ints & THROTTLE_BITS) != 0].sum())


def _resolution_note(r: _Readings, t0: float, t1: float, coarse: bool) -> str:
    notes = []
    if coarse:
        notes.append("part of this range is only kept as 10 s buckets "
                     "(older than the full-resolution window)")
    for metric in ("util_pct", "power_w"):
        t, _ = r.series(metric, t0, t1)
        label = "utilisation" if metric == "util_pct" else "power"
        if len(t) < 2:
            notes.append(f"{label}: {len(t)} sample(s) in {t1 - t0:.2f}s; the block was shorter than "
                         "the sampling interval")
            continue
        spacing = float(np.median(np.diff(t)))
        if spacing > COARSE_SPACING_S:
            notes.append(f"{label} sampled every {spacing:.1f}s; shorter peaks are not seen")
    return "; ".join(notes)


def summarize(full: Timeline, t0: float, t1: float, status: str = "ok",
              gpus: list | None = None) -> pd.DataFrame:
    """One row per GPU summarising [t0, t1] of ``full`` (a sampler's whole timeline).

    Args:
        full: the sampler's timeline; readings just outside the range stand for the edges.
        t0, t1: epoch seconds of the block's start and end.
        status: "ok", "failed" or "interrupted", copied into every row.
        gpus: device indices to include; None includes every device of the timeline.
    """
    return rows_frame(summary_rows(full, t0, t1, status, gpus))


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """Summary rows as a DataFrame, ``start``/``end`` as UTC timestamps."""
    import pandas as pd

    keys = list(dict.fromkeys(c for r in rows for c in r))
    lead = [c for c in LEAD_COLUMNS if c in keys]
    rest = [c for c in keys if c not in SUMMARY_COLUMNS and c not in lead]
    df = pd.DataFrame(rows, columns=[*lead, *SUMMARY_COLUMNS, *rest])
    for col in ("start", "end"):
        df[col] = pd.to_datetime(df[col].astype("float64"), unit="s", utc=True)
    return df


def summary_rows(full: Timeline, t0: float, t1: float, status: str = "ok",
                 gpus: list | None = None) -> list[dict]:
    """``summarize`` as plain dicts (epoch-second ``start``/``end``): cheap to keep and combine."""
    rows = []
    for dev in full.devices:
        gpu = dev["index"]
        if not selected(gpu, gpus):
            continue
        row: dict[str, object] = {c: math.nan for c in SUMMARY_COLUMNS}
        row.update(gpu=gpu, name=dev.get("name", ""), status=status,
                   start=t0, end=t1, duration_s=t1 - t0)
        r = _Readings(full, gpu, t0 - EDGE_SLACK_S, t1 + EDGE_SLACK_S)
        _mt, mv = r.series("mem_used_bytes", t0, t1)
        m_start = _edge_value(r, "mem_used_bytes", t0, before=True)
        m_end = _edge_value(r, "mem_used_bytes", t1, before=False)
        if math.isnan(m_start):
            m_start = float(mv[0]) if len(mv) else math.nan
        if math.isnan(m_end):
            m_end = float(mv[-1]) if len(mv) else m_start
        edges = [v for v in (m_start, m_end) if not math.isnan(v)]
        peak = max([float(mv.max()), *edges]) if len(mv) else (max(edges) if edges else math.nan)
        row.update(mem_start_bytes=m_start, mem_end_bytes=m_end, mem_peak_bytes=peak,
                   mem_delta_bytes=m_end - m_start)
        samples = 0
        for metric, mean_col, max_col in (("util_pct", "util_mean_pct", "util_max_pct"),
                                          ("power_w", "power_mean_w", "power_max_w"),
                                          ("sm_active_pct", "sm_active_mean_pct", None),
                                          ("temp_c", None, "temp_max_c")):
            t, v = r.series(metric, t0, t1)
            if not len(v):
                t, v = r.series(metric)
                i = _nearest(t, (t0 + t1) / 2, EDGE_SLACK_S + (t1 - t0) / 2)
                t, v = (t[i:i + 1], v[i:i + 1]) if i is not None else (t[:0], v[:0])
            samples = max(samples, len(v))
            if not len(v):
                continue
            if mean_col:
                row[mean_col] = float(v.mean())
            if max_col:
                row[max_col] = float(v.max())
        row["samples"] = samples
        row["energy_j"], row["energy_source"] = energy_j(full, t0, t1, gpu, r)
        bt, bv = r.series("clock_event_reasons", t0 - EDGE_SLACK_S, t1)
        if len(bt):
            first = max(int(np.searchsorted(bt, t0, "right")) - 1, 0)
            row["throttle_reasons"], row["throttle_s"] = _throttle(bt[first:], bv[first:], t0, t1)
        else:
            row["throttle_reasons"] = ""
        row["resolution_note"] = _resolution_note(r, t0, t1, r.decimated(t0, t1))
        rows.append(row)
    return rows


def combine(per_gpu) -> dict[str, object]:
    """One row for all GPUs: sums of memory, power and energy, means of utilisation, maxima.

    ``per_gpu`` is a summary DataFrame or a list of summary rows (dicts). MIG slices are
    left out when their whole card is in the rows.
    """
    rows = per_gpu.to_dict("records") if hasattr(per_gpu, "to_dict") else list(per_gpu or [])
    whole = [r for r in rows if not _is_mig(r.get("gpu"))]
    rows = whole or rows  # MIG slices are part of their card: don't count them twice
    if not rows:
        return {}

    def values(col: str) -> list[float]:
        out = []
        for r in rows:
            v = r.get(col)
            if v is not None and not isinstance(v, str) and v == v:
                out.append(float(v))
        return out

    def total(col: str) -> float:
        v = values(col)
        return float(sum(v)) if v else math.nan

    def agg(col: str, how: str) -> float:
        v = values(col)
        if not v:
            return math.nan
        return max(v) if how == "max" else sum(v) / len(v)

    reasons = sorted({r.split(" ")[0] for row in rows if isinstance(row.get("throttle_reasons"), str)
                      and row["throttle_reasons"] for r in row["throttle_reasons"].split(", ")})
    sources = sorted({row["energy_source"] for row in rows if isinstance(row.get("energy_source"), str)})
    notes = sorted({row["resolution_note"] for row in rows
                    if isinstance(row.get("resolution_note"), str) and row["resolution_note"]})
    return {
        "gpus": len(rows),
        "duration_s": float(rows[0]["duration_s"]),
        "mem_start_bytes": total("mem_start_bytes"), "mem_end_bytes": total("mem_end_bytes"),
        "mem_peak_bytes": agg("mem_peak_bytes", "max"), "mem_delta_bytes": total("mem_delta_bytes"),
        "util_mean_pct": agg("util_mean_pct", "mean"), "util_max_pct": agg("util_max_pct", "max"),
        "sm_active_mean_pct": agg("sm_active_mean_pct", "mean"),
        "power_mean_w": total("power_mean_w"), "power_max_w": agg("power_max_w", "max"),
        "energy_j": total("energy_j"), "energy_source": "+".join(sources),
        "temp_max_c": agg("temp_max_c", "max"),
        "throttle_reasons": ", ".join(reasons), "throttle_s": agg("throttle_s", "max"),
        "resolution_note": "; ".join(notes),
    }
