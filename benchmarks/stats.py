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
