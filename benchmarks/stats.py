"""Small statistics for benchmark figures: medians, robust spread, slowdowns."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence


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
