"""Small statistics for benchmark figures: medians, robust spread, slowdowns, step-attributed excess."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence

import numpy as np


def median(values: Sequence[float]) -> float:
    """Median of the finite values (NaN when there are none)."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def robust_sigma_pct(values: Sequence[float]) -> float:
    """Run-to-run noise: 1.4826 × median absolute deviation, as % of the median."""
    mid = median(values)
    if not math.isfinite(mid) or mid == 0:
        return math.nan
    mad = median([abs(v - mid) for v in values])
    return 100.0 * 1.4826 * mad / abs(mid)


def slowdown_pct(baseline: float, value: float) -> float:
    """How much slower ``value`` (a rate) is than ``baseline``, in percent (negative: faster)."""
    if not (math.isfinite(baseline) and math.isfinite(value)) or baseline == 0:
        return math.nan
    return 100.0 * (1.0 - value / baseline)


def median_spacing_s(times: Sequence[float]) -> float:
    """Median gap between consecutive times, in seconds (NaN with fewer than 2 points)."""
    ts = sorted(float(t) for t in times)
    gaps = [b - a for a, b in itertools.pairwise(ts) if b > a]
    return median(gaps)


def rate_per_s(count: float, seconds: float) -> float:
    """``count`` per second of ``seconds`` (NaN for a zero duration)."""
    return count / seconds if seconds > 0 else math.nan


def median_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median: order statistics picked with Binomial(n, 1/2).

    The interval [x_(k), x_(n-k+1)] holds the true median with at least ``confidence``; NaN
    with fewer than 6 finite values (no such k exists at 95 %).
    """
    xs = sorted(float(v) for v in values if v is not None and math.isfinite(v))
    n = len(xs)
    alpha = (1.0 - confidence) / 2.0
    k, cdf = 0, 0.0
    # largest k with P(Binomial(n, 1/2) <= k - 1) <= alpha
    while k < n:
        p_k = math.comb(n, k) / 2.0**n
        if cdf + p_k > alpha:
            break
        cdf += p_k
        k += 1
    if k == 0:
        return math.nan, math.nan
    return xs[k - 1], xs[n - k]


# Step-attributed excess time (the interference benchmark's estimator). Steps are numbered
# 1..n: step k ran from end_ns[k-1] to end_ns[k]; cpu_ns[k] is the monitor threads' summed
# CPU clock read right after end_ns[k]; index 0 is the mark taken before the first step.


def touched_steps(cpu_ns: Sequence[int], spill_steps: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Steps during which a monitor thread ran, plus ``spill_steps`` after each; and run starts.

    Returns two boolean arrays of one entry per step: ``touched`` (a monitor thread's CPU
    clock advanced during the step, or during one of the ``spill_steps`` before it) and
    ``run_start`` (the first step of each unbroken run of steps whose clock advanced).
    """
    if spill_steps < 0:
        raise ValueError(f"spill_steps must be 0 or more, got {spill_steps}")
    direct = np.diff(np.asarray(cpu_ns, dtype=np.int64)) > 0
    touched = direct.copy()
    for k in range(1, spill_steps + 1):
        touched[k:] |= direct[:-k]
    run_start = direct & ~np.concatenate(([False], direct[:-1]))
    return touched, run_start


def _window_sums(times: np.ndarray, columns: list[np.ndarray], centres: np.ndarray,
                 window_s: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """For each centre: how many ``times`` lie within ±``window_s``, and each column's sum over them."""
    lo = np.searchsorted(times, centres - window_s, side="left")
    hi = np.searchsorted(times, centres + window_s, side="right")
    sums = []
    for col in columns:
        cs = np.concatenate(([0.0], np.cumsum(col)))
        sums.append(cs[hi] - cs[lo])
    return hi - lo, sums


def step_excess(end_ns: Sequence[int], touched: np.ndarray, window_s: float = 0.2,
                run_start: np.ndarray | None = None, baseline: str = "mean",
                min_baseline: int = 10) -> dict[str, np.ndarray]:
    """Each touched step's excess: its duration minus the untouched steps' level within ±``window_s``.

    ``baseline`` is "mean" (unbiased whatever the shape of the jitter) or "median" (biased
    upward for right-skewed step times; kept to show it). With ``run_start``, the length
    bias is taken off too: a step is touched with a chance in proportion to its length, so
    with no effect at all the first step of a run is longer than its neighbours' mean by
    their var/mean, and each later step of the run (or spill) by their lag-1
    autocovariance/mean (the loop's level where wake-ups land, weighted by time, is above
    its mean over steps when the level drifts). A touched step with fewer than
    ``min_baseline`` untouched neighbours has no excess (0) and is flagged in
    ``unbaselined``. Returns per-step arrays (seconds): ``duration_s``, ``end_s`` (since
    the start mark), ``excess_s`` (0 for untouched steps), ``length_bias_s``.
    """
    if baseline not in ("mean", "median"):
        raise ValueError(f"baseline must be 'mean' or 'median', got {baseline!r}")
    end = np.asarray(end_ns, dtype=np.int64)
    dur = np.diff(end) / 1e9
    t = (end[1:] - end[0]) / 1e9
    touched = np.asarray(touched, dtype=bool)
    free = ~touched
    idx = np.flatnonzero(touched)
    free_d = dur[free]
    count, (s1, s2) = _window_sums(t[free], [free_d, free_d * free_d], t[idx], window_s)
    ok = count >= max(min_baseline, 1)
    safe = np.where(ok, count, 1)
    mean = s1 / safe
    if baseline == "mean":
        level = mean
    else:
        lo = np.searchsorted(t[free], t[idx] - window_s, side="left")
        level = np.array([np.median(free_d[a:a + n]) if good else 0.0
                          for a, n, good in zip(lo, count, ok, strict=True)])
    excess = np.zeros_like(dur)
    excess[idx] = np.where(ok, dur[idx] - level, 0.0)
    bias = np.zeros_like(dur)
    if run_start is not None:
        pair = free[:-1] & free[1:]  # consecutive untouched steps, for the lag-1 autocovariance
        a, b = dur[:-1][pair], dur[1:][pair]
        n_pairs, (pab, pa, pb) = _window_sums(t[:-1][pair], [a * b, a, b], t[idx], window_s)
        n_safe = np.maximum(n_pairs, 1)
        cov1 = np.where(n_pairs >= 2, pab / n_safe - (pa / n_safe) * (pb / n_safe), 0.0)
        var = s2 / safe - mean * mean
        first = np.asarray(run_start, dtype=bool)[idx]
        lb = np.where(first, var, cov1) / np.where(mean > 0, mean, 1.0)
        bias[idx] = np.where(ok, lb, 0.0)
        excess -= bias
    unbaselined = np.zeros_like(touched)
    unbaselined[idx[~ok]] = True
    return {"duration_s": dur, "end_s": t, "excess_s": excess, "length_bias_s": bias,
            "unbaselined": unbaselined}


def segment_sums(end_s: np.ndarray, values: Sequence[np.ndarray], segment_s: float) -> list[np.ndarray]:
    """Sums of each per-step array over consecutive spans of ``segment_s`` (the last one takes the rest)."""
    total = float(end_s[-1]) if len(end_s) else 0.0
    n = max(1, round(total / segment_s))
    seg = np.minimum((np.asarray(end_s) / segment_s).astype(np.int64), n - 1)
    return [np.bincount(seg, weights=v, minlength=n) for v in values]


def block_bootstrap_ratio_pct(excess_s: np.ndarray, wall_s: np.ndarray, block: int = 2,
                              resamples: int = 2000, seed: int = 0,
                              confidence: float = 0.95) -> tuple[float, float]:
    """Percentile interval of 100·Σexcess / (Σwall − Σexcess) by a circular block bootstrap of segments.

    Blocks of ``block`` consecutive segments (at most half of them) are drawn with
    replacement, so short-range correlation between neighbouring segments (shared
    baseline windows) stays inside a block. NaN with fewer than 4 segments.
    """
    e, w = np.asarray(excess_s, dtype=float), np.asarray(wall_s, dtype=float)
    n = len(e)
    if n < 4:
        return math.nan, math.nan
    size = max(1, min(block, n // 2))
    blocks = -(-n // size)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n, size=(resamples, blocks))
    picks = (starts[:, :, None] + np.arange(size)) % n
    ex, wa = e[picks].sum(axis=(1, 2)), w[picks].sum(axis=(1, 2))
    ratio = 100.0 * ex / (wa - ex)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(ratio, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def excess_slowdown(end_ns: Sequence[int], cpu_ns: Sequence[int], window_s: float = 0.2,
                    spill_steps: int = 2, segment_s: float = 1.0, block: int = 2,
                    baseline: str = "mean", length_bias: bool = True, resamples: int = 2000,
                    seed: int = 0) -> dict:
    """Slowdown % = total excess / (wall − total excess) × 100, with its block-bootstrap 95 % interval.

    ``end_ns``/``cpu_ns``: the step end times and the monitor threads' CPU clock (see
    ``touched_steps``). Figures are in seconds unless their name says otherwise.
    """
    if len(end_ns) < 3 or len(end_ns) != len(cpu_ns):
        raise ValueError("need matching end_ns and cpu_ns arrays of at least 3 marks")
    touched, starts = touched_steps(cpu_ns, spill_steps)
    ex = step_excess(end_ns, touched, window_s, starts if length_bias else None, baseline)
    seg_excess, seg_wall = segment_sums(ex["end_s"], [ex["excess_s"], ex["duration_s"]], segment_s)
    total, wall = float(ex["excess_s"].sum()), float(ex["duration_s"].sum())
    lo, hi = block_bootstrap_ratio_pct(seg_excess, seg_wall, block, resamples, seed)
    steps = len(touched)
    return {"slowdown_pct": 100.0 * total / (wall - total), "ci95_pct": [lo, hi],
            "excess_s": total, "wall_s": wall, "steps": steps,
            "mean_step_s": wall / steps, "touched_steps": int(touched.sum()),
            "touched_fraction": float(touched.mean()), "runs": int(starts.sum()),
            "unbaselined_steps": int(ex["unbaselined"].sum()),
            "length_bias_s": float(ex["length_bias_s"].sum()),
            "window_s": window_s, "spill_steps": spill_steps, "baseline": baseline,
            "segment_s": segment_s, "bootstrap_block_segments": block,
            "segment_excess_s": seg_excess.tolist(), "segment_wall_s": seg_wall.tolist()}
