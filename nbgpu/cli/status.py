"""Text for people: the live one-line status per GPU and the end-of-run summary."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..metrics import THROTTLE_BITS
from ..profiles.summary import integrate_power_j

if TYPE_CHECKING:
    import pandas as pd

    from ..sampler import Sampler


def _num(v: object, fmt: str = "{:.0f}", unit: str = "") -> str:
    if v is None or not isinstance(v, (int, float)) or v != v:
        return "–"
    return fmt.format(v) + unit


def status_lines(sampler: Sampler) -> list[str]:
    """One line per GPU with its newest util, memory, power and temperature."""
    lines = []
    for row in sampler.latest():
        used, total = row.get("mem_used_bytes"), row.get("mem_total_bytes")
        mem = f"{_num(used and used / 1e9, '{:.1f}')}/{_num(total and total / 1e9, '{:.0f}')} GB"
        power = f"{_num(row.get('power_w'))}/{_num(row.get('power_limit_w'))} W"
        state = "  LOST" if row["state"] == "lost" else ""
        lines.append(f"GPU {row['gpu']:<4} util {_num(row.get('util_pct'), '{:3.0f}', '%')}  mem {mem:<16}"
                     f" power {power:<12} {_num(row.get('temp_c'), '{:.0f}', '°C')}{state}")
    return lines


def epoch_seconds(times: pd.Series) -> np.ndarray:
    """Seconds since the epoch of a UTC datetime column, whatever its precision."""
    import pandas as pd

    return (times - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()


def run_energy_j(t: np.ndarray, counter_j: np.ndarray, power_w: np.ndarray) -> float:
    """Joules over the span of ``t``: the energy counter where it moved, power integrated elsewhere.

    Rows written with forward-filled values repeat a counter reading, so a reading counts
    where the counter's value first appears. Between the first and last such readings the
    counter's delta is exact; before and after them, power is integrated to the run's edges.
    """
    okp = ~np.isnan(power_w)
    tp, pw = t[okp], power_w[okp]
    t0, t1 = (float(t.min()), float(t.max())) if len(t) else (math.nan, math.nan)
    oke = ~np.isnan(counter_j)
    te, ev = t[oke], counter_j[oke]
    first_seen = np.r_[True, np.diff(ev) != 0] if len(ev) else np.zeros(0, dtype=bool)
    te, ev = te[first_seen], ev[first_seen]
    if len(ev) >= 2 and te[-1] > te[0] and ev[-1] >= ev[0]:
        energy = float(ev[-1] - ev[0])
        if len(tp) >= 2:
            edges = [(t0, float(te[0])), (float(te[-1]), t1)]
            energy += sum(integrate_power_j(tp, pw, a, b) for a, b in edges if b > a)
        return energy
    if len(tp) >= 2:
        return integrate_power_j(tp, pw, t0, t1)
    return math.nan


def summarize_frame(df: pd.DataFrame) -> list[dict]:
    """Per-GPU figures of a run's DataFrame (``time``, ``gpu``, metric columns); NaN when unknown."""
    out = []
    if df.empty:
        return out
    for gpu, g in df.groupby("gpu", sort=False):
        t = epoch_seconds(g["time"])

        def col(name: str, g: pd.DataFrame = g) -> np.ndarray:
            return g[name].to_numpy(dtype=np.float64) if name in g else np.full(len(g), np.nan)

        def agg(fn, name: str) -> float:
            v = col(name)
            return float(fn(v[~np.isnan(v)])) if (~np.isnan(v)).any() else math.nan

        energy = run_energy_j(t, col("energy_j"), col("power_w"))
        bits = col("clock_event_reasons")
        bits = bits[~np.isnan(bits)].astype(np.int64)
        out.append({
            "gpu": gpu, "duration_s": float(t.max() - t.min()) if len(t) else math.nan,
            "util_mean_pct": agg(np.mean, "util_pct"), "util_max_pct": agg(np.max, "util_pct"),
            "mem_peak_bytes": agg(np.max, "mem_used_bytes"),
            "mem_total_bytes": agg(np.max, "mem_total_bytes"),
            "power_mean_w": agg(np.mean, "power_w"), "power_max_w": agg(np.max, "power_w"),
            "energy_j": energy, "temp_max_c": agg(np.max, "temp_c"),
            "throttled": bool(len(bits) and (bits & THROTTLE_BITS).any()),
        })
    return out


def summary_text(rows: list[dict]) -> list[str]:
    """The summary as lines of text, one per GPU."""
    lines = []
    for r in rows:
        mem = r["mem_peak_bytes"] / 1e9 if r["mem_peak_bytes"] == r["mem_peak_bytes"] else math.nan
        lines.append(
            f"GPU {r['gpu']}: util mean {_num(r['util_mean_pct'], '{:.0f}', '%')} "
            f"max {_num(r['util_max_pct'], '{:.0f}', '%')}, mem peak {_num(mem, '{:.1f}', ' GB')}, "
            f"power mean {_num(r['power_mean_w'], '{:.0f}', ' W')}, "
            f"energy {_num(r['energy_j'], '{:.0f}', ' J')}, "
            f"temp max {_num(r['temp_max_c'], '{:.0f}', '°C')}" + (", THROTTLED" if r["throttled"] else ""))
    return lines
