"""Synthetic step series for the interference estimator, and how often its interval holds the truth.

Steps of about 600 µs (the launch-bound loop on the H200) whose speed drifts by ±30 % (a
slow wave plus speed switches, as seen there) with jitter on top; monitor wake-ups land at
random times and mark the step they land in, as a CPU clock advancing would.
``python -m benchmarks.synthetic_steps [N]`` prints the interval's coverage over N seeds.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from .stats import excess_slowdown

STEP_S = 600e-6


def drifting_steps(seconds: float, rng: np.random.Generator, jitter: str = "lognormal",
                   sigma: float = 0.15) -> np.ndarray:
    """Step durations (s): ±30 % drift (a 5 s wave and speed switches every ~1 s) times jitter."""
    n = int(seconds / STEP_S)
    t = np.arange(n) * STEP_S
    switches = np.repeat(rng.choice([-1.0, 1.0], size=int(seconds) + 2), int(1.0 / STEP_S))[:n]
    level = 1.0 + 0.15 * np.sin(2 * np.pi * t / 5.0) + 0.15 * switches
    if jitter == "lognormal":
        noise = rng.lognormal(0.0, sigma, n) / math.exp(sigma**2 / 2)
    else:  # exponential tail: strongly right-skewed, mean 1
        noise = 0.8 + rng.exponential(0.2, n)
    return STEP_S * level * noise


def mark_random_events(dur_s: np.ndarray, per_s: float, rng: np.random.Generator) -> np.ndarray:
    """Indices (0-based steps) hit by wake-ups at uniformly random times: long steps more often."""
    ends = np.cumsum(dur_s)
    times = rng.uniform(0.0, ends[-1], rng.poisson(per_s * ends[-1]))
    return np.unique(np.searchsorted(ends, times))


def series(dur_s: np.ndarray, hit: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(end_ns, cpu_ns) marks as the recorder stores them: mark 0, then one after each step."""
    end_ns = np.concatenate(([0], np.cumsum(np.round(dur_s * 1e9).astype(np.int64))))
    inc = np.zeros(len(dur_s), dtype=np.int64)
    inc[hit] = 50_000
    cpu_ns = np.concatenate(([0], np.cumsum(inc)))
    return end_ns, cpu_ns


def coverage(seeds: int, seconds: float = 60.0, per_s: float = 20.0, inject_s: float = 300e-6) -> dict:
    """Over ``seeds`` series: how often the 95 % interval holds the injected truth, and 0 with none."""
    held, held_zero, rel = 0, 0, []
    for seed in range(seeds):
        rng = np.random.default_rng(1000 + seed)
        dur = drifting_steps(seconds, rng)
        hit = mark_random_events(dur, per_s, rng)
        dur[hit] += inject_s
        truth = 100.0 * len(hit) * inject_s / (dur.sum() - len(hit) * inject_s)
        res = excess_slowdown(*series(dur, hit), resamples=1000)
        held += res["ci95_pct"][0] <= truth <= res["ci95_pct"][1]
        rel.append(res["slowdown_pct"] / truth - 1.0)
        rng = np.random.default_rng(5000 + seed)
        dur = drifting_steps(seconds, rng)
        null = excess_slowdown(*series(dur, mark_random_events(dur, per_s, rng)), resamples=1000)
        lo, hi = null["ci95_pct"]
        held_zero += lo <= 0.0 <= hi
    return {"seeds": seeds, "truth_held": int(held), "zero_held_without_effect": held_zero,
            "mean_relative_error": float(np.mean(rel)), "max_abs_relative_error": float(np.max(np.abs(rel)))}


if __name__ == "__main__":
    print(coverage(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
