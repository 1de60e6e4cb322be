"""Property tests: the invariants a person assumes of every summary row, per GPU and combined.

peak ≥ start and end, |Δ| ≤ peak, max ≥ mean ≥ min, energy ≥ 0 and energy ≈ mean power ×
duration (exact where energy comes from power; the counter case is checked with a counter
that agrees with the power readings).
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nbgpu.metrics import BY_NAME
from nbgpu.profiles.render import one_line
from nbgpu.profiles.summary import summarize
from nbgpu.sources.base import Device
from nbgpu.store import Store
from nbgpu.timeline import Timeline

T0 = 1_800_000_000.0
GIB = 2**30


@st.composite
def readings(draw, lo: float, hi: float, min_size: int = 1):
    n = draw(st.integers(min_size, 30))
    # Readings at both ends of the run, so every block has readings near its edges.
    times = sorted({0.0, 10.0, *draw(st.lists(st.floats(0.0, 10.0), min_size=n, max_size=n))})
    values = draw(st.lists(st.floats(lo, hi), min_size=len(times), max_size=len(times)))
    return np.array(times), np.array(values)


@st.composite
def timelines(draw, counter: bool = False):
    store = Store()
    devices = []
    for gpu in range(draw(st.integers(1, 4))):
        for metric, (lo, hi) in (("mem_used_bytes", (0.0, 80.0 * GIB)), ("power_w", (0.0, 700.0)),
                                 ("util_pct", (0.0, 100.0))):
            t, v = draw(readings(lo, hi))
            if metric == "power_w" and counter:
                # Power read at least every second, so the readings near each edge say what the
                # counter saw (with sparser readings the note says the figure is coarse).
                t = np.arange(0.0, 10.0 + 1e-9, draw(st.floats(0.02, 1.0)))
                rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
                v = rng.uniform(lo, hi, len(t))
            store.declare(gpu, metric, {metric: BY_NAME[metric].dtype})
            store.append_many(gpu, metric, T0 + t, {metric: v})
            if metric == "power_w" and counter:
                # A counter that agrees with the power readings (their trapezoid integral).
                tt = T0 + np.union1d(t, np.arange(0.0, 10.01, 0.5))
                pp = np.interp(tt, T0 + t, v)
                joules = np.r_[0.0, np.cumsum(np.diff(tt) * (pp[1:] + pp[:-1]) / 2)]
                store.declare(gpu, "energy", {"energy_j": np.float64})
                store.append_many(gpu, "energy", tt, {"energy_j": joules + 1e6})
        devices.append(Device(gpu, f"sim {gpu}"))
    a = draw(st.floats(0.0, 9.0))
    b = draw(st.floats(a + 0.05, 10.0))
    return Timeline(store, devices), T0 + a, T0 + b


def check_row(row: dict) -> None:
    peak, start, end = row["mem_peak_bytes"], row["mem_start_bytes"], row["mem_end_bytes"]
    assert peak >= start and peak >= end
    assert abs(row["mem_delta_bytes"]) <= peak
    eps = 1e-6
    for lo, mean, hi in (("util_min_pct", "util_mean_pct", "util_max_pct"),
                         ("power_min_w", "power_mean_w", "power_max_w")):
        assert row[hi] + eps >= row[mean] >= row[lo] - eps, (lo, row[lo], row[mean], row[hi])
    assert row["energy_j"] >= 0
    expected = row["power_mean_w"] * row["duration_s"]
    assert math.isclose(row["energy_j"], expected, rel_tol=1e-6, abs_tol=1e-6)


@settings(max_examples=150, deadline=None)
@given(timelines())
def test_every_row_keeps_the_invariants(case):
    tl, a, b = case
    result = summarize(tl, a, b)
    for row in [*result.rows, result.combined]:
        check_row(row)
    assert result.combined["power_mean_w"] >= max(r["power_mean_w"] for r in result.rows) - 1e-6
    assert result.combined["mem_peak_bytes"] >= max(r["mem_peak_bytes"] for r in result.rows)


@settings(max_examples=60, deadline=None)
@given(timelines(counter=True))
def test_energy_from_a_counter_matches_mean_power(case):
    tl, a, b = case
    result = summarize(tl, a, b)
    for row in [*result.rows, result.combined]:
        if b - a >= 1.0:  # counter readings every 0.5 s: a block this long spans two
            assert "counter" in row["energy_source"]
        check_row(row)


@settings(max_examples=60, deadline=None)
@given(timelines())
def test_the_one_line_never_shows_a_delta_above_its_peak(case):
    tl, a, b = case
    result = summarize(tl, a, b)
    line = one_line(result)
    shown = result.combined if len(result.rows) > 2 else None
    rows = [shown] if shown else result.rows
    for row in rows:
        assert abs(row["mem_delta_bytes"]) <= row["mem_peak_bytes"]
    assert line.count("peak ") == len(rows)
