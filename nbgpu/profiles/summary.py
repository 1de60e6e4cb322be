"""The one summary code path (``summarize``): what a block of time did to each GPU and to all of them
together, as defined in docs/profiles.md ("How combined figures are defined")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..errors import BadArgumentError
from ..metrics import CLOCK_EVENT_REASONS, THROTTLE_BITS, max_column
from ..peaks import fold_peak
from ..sources.base import Device
from ..timeline import epoch_seconds, to_epoch
from ..units import fmt_duration
from .energy import (
    EDGE_SLACK_S,
    RESOLUTION_PERIODS_S,
    TARGET_ERROR,
    Readings,
    block_energy_j,
    line_knots,
    line_stats,
    timeline_readings,
)

if TYPE_CHECKING:
    import pandas as pd

    from ..timeline import Timeline

COARSE_SPACING_S = 1.0  # readings further apart than this: shorter peaks are not seen

LEAD_COLUMNS = ("iteration", "mark")
SUMMARY_COLUMNS = (
    "gpu", "name", "status", "start", "end", "duration_s", "samples",
    "mem_start_bytes", "mem_end_bytes", "mem_peak_bytes", "mem_delta_bytes", "mem_peak_source",
    "util_mean_pct", "util_min_pct", "util_max_pct", "sm_active_mean_pct",
    "power_mean_w", "power_min_w", "power_max_w", "energy_j", "energy_source", "temp_max_c",
    "throttle_reasons", "throttle_s", "resolution_note",
)
BYTE_COLUMNS = ("mem_start_bytes", "mem_end_bytes", "mem_peak_bytes", "mem_delta_bytes",
                "torch_peak_allocated_bytes", "torch_peak_reserved_bytes",
                "torch_allocated_end_bytes", "torch_reserved_end_bytes")
_LINEAR = {"util_pct": ("util_mean_pct", "util_min_pct", "util_max_pct"),  # (mean, min, max) columns
           "power_w": ("power_mean_w", "power_min_w", "power_max_w"),
           "sm_active_pct": ("sm_active_mean_pct", "", ""), "temp_c": ("", "", "temp_max_c")}
_MAX_COLUMNS = {m: max_column(m) for m in ("mem_used_bytes", *_LINEAR)}  # a folded frame's per-tick maxima


def selected(gpu: object, gpus: list | None, parent: object = None) -> bool:
    """Whether device ``gpu`` is among ``gpus`` (None: all); a MIG slice follows ``parent``, its card."""
    return gpus is None or gpu in gpus or (parent is not None and parent in gpus)


def texts(rows: list[dict], col: str) -> list[str]:
    """The distinct non-empty texts of column ``col``, sorted."""
    return sorted({r[col] for r in rows if isinstance(r.get(col), str) and r[col]})


def _throttle(t: np.ndarray, bits: np.ndarray, t0: float, t1: float) -> tuple[str, float]:
    """("reason 1.2s, reason 0.4s", seconds with any throttling bit) over [t0, t1]."""
    if not len(t):
        return "", math.nan
    ints = np.nan_to_num(bits, nan=0).astype(np.int64)
    present = int(np.bitwise_or.reduce(ints))
    if not present & THROTTLE_BITS:  # no throttling bit in any reading
        return "", 0.0
    held = np.diff(np.clip(np.r_[t, t1], t0, t1))  # each reading holds until the next (or t1)
    if not held.sum():  # a single reading in a very short range
        held = np.full(len(t), (t1 - t0) / len(t))
    seen = [f"{name} {float(held[(ints & bit) != 0].sum()):.1f}s"
            for bit, name in CLOCK_EVENT_REASONS.items() if bit & THROTTLE_BITS & present]
    return ", ".join(seen), float(held[(ints & THROTTLE_BITS) != 0].sum())


def _resolution_note(r: Readings, t0: float, t1: float, energy_source: str) -> str:
    """What this block's figures cannot tell, in words; empty when nothing is in doubt."""
    notes = []
    duration = t1 - t0
    if r.bucketed:
        notes.append("part of this range is only kept as 10 s buckets "
                     "(older than the full-resolution window)")
    for metric in ("util_pct", "power_w"):
        t, _ = r.series(metric, t0, t1)
        label = "utilisation" if metric == "util_pct" else "power"
        if len(t) < 2:
            ticked = len(r.series("mem_used_bytes", t0, t1)[0]) >= 2  # the sampler did tick inside
            why = ("its samples were not yet read from NVML's buffer (read every few seconds; ask "
                   "again)" if ticked else "the block was shorter than the sampling interval")
            notes.append(f"{label}: {len(t)} sample(s) in {duration:.2f}s; {why}")
            continue
        spacing = float(np.median(t[1:] - t[:-1]))
        if spacing > COARSE_SPACING_S:
            notes.append(f"{label} sampled every {spacing:.1f}s; shorter peaks are not seen")
    counter = energy_source == "counter"
    period = RESOLUTION_PERIODS_S["energy_period_s" if counter else "power_period_s"]
    if energy_source != "none" and duration < period / TARGET_ERROR:
        notes.append(f"energy: the block ({fmt_duration(duration)}) is shorter than {1 / TARGET_ERROR:.0f} "
                     f"updates of the {'energy counter' if counter else 'power readings'} (every "
                     f"{period * 1000:.0f} ms, measured), so it may "
                     f"be off by more than {TARGET_ERROR:.0%}")
    return "; ".join(notes)


def as_count(v: float) -> object:
    """A byte count as an int; NaN stays NaN (unknown, never 0)."""
    return round(float(v)) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


@dataclass
class _Lines:
    """The aligned pieces of one GPU that combined figures are built from."""

    mem: tuple[np.ndarray, np.ndarray] | None = None
    linear: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    mem_nvml_peak: float = math.nan


def _memory(r: Readings, t0: float, t1: float) -> tuple[float, float, tuple | None]:
    """(start, end, held knots) of memory used: newest at/before t0, first at/after t1."""
    t, v = r.series("mem_used_bytes")
    if not len(t):
        return math.nan, math.nan, None
    # first: the oldest that may stand for t0; last: past the newest that may stand for t1
    first, in_lo, from_t1 = t.searchsorted((t0 - EDGE_SLACK_S, t0, t1), "left").tolist()
    upto_t0, in_hi, last = t.searchsorted((t0, t1, t1 + EDGE_SLACK_S), "right").tolist()
    inside = in_hi > in_lo  # readings in [t0, t1]
    start = (float(v[upto_t0 - 1]) if upto_t0 > first
             else float(v[in_lo]) if inside else math.nan)
    end = (float(v[from_t1]) if last > from_t1
           else float(v[in_hi - 1]) if inside else start)
    if math.isnan(start):
        start = end
    if math.isnan(start):
        return math.nan, math.nan, None
    inner = slice(upto_t0, from_t1)  # readings strictly inside (t0, t1)
    return start, end, (np.concatenate(([t0], t[inner], [t1])), np.concatenate(([start], v[inner], [end])))


def _gpu_row(dev: Device, r: Readings, t0: float, t1: float, status: str, alloc: dict | None
             ) -> tuple[dict, _Lines]:
    def frame_max(metric: str, value: float) -> float:
        """``value``, raised to a folded frame's per-tick maximum of ``metric`` in the block."""
        _, mv = r.series(_MAX_COLUMNS[metric], t0, t1)
        return max(value, float(mv.max())) if len(mv) else value

    row: dict[str, object] = dict.fromkeys(SUMMARY_COLUMNS, math.nan)
    row.update(gpu=dev.key, name=dev.name, parent=dev.parent, status=status, start=t0, end=t1,
               duration_s=t1 - t0)
    lines = _Lines()
    start, end, held = _memory(r, t0, t1)
    if held is not None:
        peak = frame_max("mem_used_bytes", float(held[1].max()))
        row.update(mem_start_bytes=start, mem_end_bytes=end, mem_peak_bytes=peak,
                   mem_delta_bytes=end - start)
        lines.mem, lines.mem_nvml_peak = held, peak
    peak = fold_peak(row["mem_peak_bytes"], row["mem_start_bytes"], alloc)  # the allocator's, if more
    row["mem_peak_bytes"], row["mem_peak_source"] = peak.bytes, peak.source
    samples = 0
    for metric in _LINEAR:
        t, v = r.series(metric, t0 - EDGE_SLACK_S, t1 + EDGE_SLACK_S)
        if not len(t):
            continue
        samples = max(samples, int(t.searchsorted(t1, "right")) - int(t.searchsorted(t0, "left")))
        knots = lines.linear[metric] = line_knots(t, v, t0, t1)
        mean, lo, hi = line_stats(*knots)
        row.update((col, value) for col, value in zip(_LINEAR[metric], (mean, lo, frame_max(metric, hi)),
                                                      strict=True) if col)
    row["samples"] = samples
    row["energy_j"], row["energy_source"] = block_energy_j(r, t0, t1)
    bt, bv = r.series("clock_event_reasons", t0 - EDGE_SLACK_S, t1)
    first = max(int(bt.searchsorted(t0, "right")) - 1, 0)  # the reading in force at t0, then the block's
    row["throttle_reasons"], row["throttle_s"] = _throttle(bt[first:], bv[first:], t0, t1)
    row["resolution_note"] = _resolution_note(r, t0, t1, str(row["energy_source"]))
    return row, lines


def _aligned(pieces: list[tuple[np.ndarray, np.ndarray]], how: str, step: bool) -> np.ndarray:
    """The GPUs' lines on the union of their times, summed or averaged across GPUs."""
    grid = np.unique(np.concatenate([t for t, _ in pieces]))
    stack = np.vstack([v[np.clip(np.searchsorted(t, grid, "right") - 1, 0, len(t) - 1)] if step
                       else np.interp(grid, t, v) for t, v in pieces])
    return stack.sum(axis=0) if how == "sum" else stack.mean(axis=0)


def _combine(rows: list[dict], lines: list[_Lines], t0: float, t1: float) -> dict[str, object]:
    """One row for all GPUs, as defined in docs/profiles.md; MIG slices of a listed card left out."""
    listed = {r["gpu"] for r in rows}
    keep = [i for i, r in enumerate(rows) if r.get("parent") not in listed]
    rows, lines = [rows[i] for i in keep], [lines[i] for i in keep]
    if not rows:
        return {}

    def agg(col: str, how: str) -> float:
        """The sum, mean or max of a column's known values across GPUs (NaN: none known)."""
        v = [float(r[col]) for r in rows if isinstance(r.get(col), (int, float)) and math.isfinite(r[col])]
        return math.nan if not v else max(v) if how == "max" else sum(v) / (len(v) if how == "mean" else 1)

    out: dict[str, object] = {c: math.nan for c in SUMMARY_COLUMNS}
    out.update(gpu="all", name=f"{len(rows)} GPUs", gpus=len(rows), status=rows[0]["status"],
               start=t0, end=t1, duration_s=t1 - t0, samples=max([int(r["samples"]) for r in rows]))
    mem = [(r, ln) for r, ln in zip(rows, lines, strict=True) if ln.mem is not None]
    if mem:
        aligned_peak = float(_aligned([ln.mem for _, ln in mem], "sum", step=True).max())
        missed = max(float(r["mem_peak_bytes"]) - ln.mem_nvml_peak for r, ln in mem)  # the allocator saw more
        start, end = (sum(float(r[col]) for r, _ in mem) for col in ("mem_start_bytes", "mem_end_bytes"))
        out.update(mem_start_bytes=start, mem_end_bytes=end, mem_delta_bytes=end - start,
                   mem_peak_bytes=aligned_peak + max(missed, 0.0))
    sources = {r["mem_peak_source"] for r in rows}
    out["mem_peak_source"] = sources.pop() if len(sources) == 1 else "both"
    for metric, how in (("util_pct", "mean"), ("power_w", "sum")):
        mean_col, min_col, max_col = _LINEAR[metric]
        pieces = [ln.linear[metric] for ln in lines if metric in ln.linear]
        if not pieces:
            continue
        line = _aligned(pieces, how, step=False)
        out[mean_col] = agg(mean_col, how)
        out[min_col], out[max_col] = float(line.min()), float(line.max())
        if how == "sum":  # a folded frame's per-tick maxima of one card count too
            out[max_col] = max(float(out[max_col]), agg(max_col, "max"))
    reasons = {part.split(" ")[0] for text in texts(rows, "throttle_reasons") for part in text.split(", ")}
    out.update(sm_active_mean_pct=agg("sm_active_mean_pct", "mean"), energy_j=agg("energy_j", "sum"),
               energy_source="+".join(sorted({str(r["energy_source"]) for r in rows})),
               temp_max_c=agg("temp_max_c", "max"), throttle_s=agg("throttle_s", "max"),
               throttle_reasons=", ".join(sorted(reasons)),
               resolution_note="; ".join(texts(rows, "resolution_note")))
    return out


@dataclass
class Summary:
    """Per-GPU rows and one combined row of a block; byte counts are ints (NaN if unknown)."""

    rows: list[dict]
    combined: dict


def summarize(data: Timeline | pd.DataFrame, t0: object = None, t1: object = None, *,
              gpus: list | None = None, status: str = "ok", devices: list | None = None,
              allocator: dict | None = None) -> Summary:
    """Summarise [t0, t1] (None: the window's or frame's ends) of a ``Timeline`` or a ``to_pandas()``
    frame (``devices``: its device descriptions): a row per GPU of ``gpus`` (None: all) and one for all;
    ``allocator``: ``{gpu: {"peak_reserved_bytes", "reserved_start_bytes"}}`` folded into the peak."""
    per_dev: list[tuple[Device, Readings]] = []
    frame = not hasattr(data, "store")
    times = epoch_seconds(data["time"]) if frame and len(data) else np.empty(0)
    ends = (data.t0, data.t1) if not frame else (times.min(), times.max()) if len(times) else (math.nan,) * 2
    a, b = (float(end if t is None else to_epoch(t)) for end, t in zip(ends, (t0, t1), strict=True))
    if not (math.isfinite(a) and math.isfinite(b)):
        raise BadArgumentError("summarize() needs t0 and t1 for an open-ended timeline; "
                               "pass epoch seconds or use timeline.between(t0, t1)")
    if not frame:
        devs = [dev for dev in data.devices if selected(dev.key, gpus, dev.parent)]
        found = timeline_readings(data, [d.key for d in devs], a - EDGE_SLACK_S, b + EDGE_SLACK_S, a, b)
        per_dev.extend(zip(devs, found, strict=True))
    else:
        described = {d.key: d for d in map(Device.of, devices or [])}
        if "gpu" in data.columns:
            for key in dict.fromkeys(data["gpu"].tolist()):
                dev = described.get(key) or Device(key, "")
                if selected(key, gpus, dev.parent):
                    rows = (data["gpu"] == key).to_numpy()
                    per_dev.append((dev, Readings.of_frame(data[rows], times[rows], a, b)))
    done = [_gpu_row(dev, r, a, b, status, (allocator or {}).get(dev.key)) for dev, r in per_dev]
    rows, lines = [row for row, _ in done], [ln for _, ln in done]
    combined = _combine(rows, lines, a, b)
    for row in [*rows, combined]:
        row.update({col: as_count(row[col]) for col in BYTE_COLUMNS if col in row})
    return Summary(rows, combined)


def rows_frame(rows: list[dict]) -> pd.DataFrame:
    """Summary rows as a DataFrame: ``start``/``end`` UTC timestamps, byte counts int64 when known."""
    import pandas as pd

    keys = list(dict.fromkeys(c for r in rows for c in r))
    lead = [c for c in LEAD_COLUMNS if c in keys]
    rest = [c for c in keys if c not in SUMMARY_COLUMNS and c not in lead]
    df = pd.DataFrame(rows, columns=[*lead, *SUMMARY_COLUMNS, *rest])
    for col in ("start", "end"):
        df[col] = pd.to_datetime(df[col].astype("float64"), unit="s", utc=True)
    for col in BYTE_COLUMNS:
        if col in df.columns and len(df) and df[col].notna().all():
            df[col] = df[col].astype("int64")
    if "parent" in df.columns:  # keys as given (0, "node/1") or None, never a float NaN
        df["parent"] = pd.Series([r.get("parent") for r in rows], index=df.index, dtype=object)
    return df


__all__ = ["SUMMARY_COLUMNS", "Summary", "rows_frame", "selected", "summarize"]
