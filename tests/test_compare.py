"""Comparing two runs: noise from each run's own readings, verdicts, the --fail-if grammar, cost."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbgpu import config
from nbgpu.errors import BadArgumentError
from nbgpu.profiles import cost
from nbgpu.profiles.comparison import (
    METRIC_UNITS,
    MIB,
    Change,
    Figure,
    RunFigures,
    changes,
    gpu_figures,
    parse_bound,
    total_figures,
    verdict,
)


def _series(n: int, util: np.ndarray, power: np.ndarray, mem: np.ndarray, dt: float = 0.1) -> dict:
    t = np.arange(n) * dt
    return {"util_pct": (t, util), "power_w": (t, power), "mem_used_bytes": (t, mem)}


def _row(energy_j: float, duration_s: float, peak: float, util: float) -> dict:
    return {"energy_j": energy_j, "duration_s": duration_s, "mem_peak_bytes": peak, "util_mean_pct": util}


# -- noise ---------------------------------------------------------------------------------------
def test_noise_follows_each_runs_own_spread():
    rng = np.random.default_rng(0)
    n = 100
    steady = _series(n, np.full(n, 90.0), np.full(n, 300.0), np.full(n, 8 * 1024**3))
    noisy = _series(n, rng.uniform(0, 100, n), rng.uniform(100, 500, n),
                    np.linspace(1, 8, n) * 1024**3)
    fs = gpu_figures(_row(3000.0, 10.0, 8 * 1024**3, 90.0), steady)
    fn = gpu_figures(_row(3000.0, 10.0, 8 * 1024**3, 50.0), noisy)
    # Steady readings: only the floors remain (integer percents, 1 MiB, one power sample).
    assert fs["util_mean_pct"].noise == pytest.approx(0.5)
    assert fs["mem_peak_bytes"].noise == MIB
    assert fs["energy_j"].noise == pytest.approx(300.0 * 0.1)
    # a cell's start and end are stamps, but the same work varies by more between runs
    assert fs["duration_s"].noise == pytest.approx(0.01 * 10.0)
    unstamped = gpu_figures(_row(3000.0, 10.0, 8 * 1024**3, 90.0), steady, stamped=False)
    assert unstamped["duration_s"].noise == pytest.approx(0.1)  # first and last readings: a tick
    # Spread readings: the noise grows with their spread and falls as one over the root of
    # how many there are (four times the same readings: half of it above the floor).
    assert fn["util_mean_pct"].noise > 10 * fs["util_mean_pct"].noise
    longer = _series(4 * n, *(np.tile(noisy[m][1], 4) for m in ("util_pct", "power_w", "mem_used_bytes")))
    fl = gpu_figures(_row(3000.0, 10.0, 8 * 1024**3, 50.0), longer)
    above = fn["util_mean_pct"].noise - 0.5, fl["util_mean_pct"].noise - 0.5
    assert above[1] == pytest.approx(above[0] / 2, rel=0.05)
    step = float(np.diff(noisy["mem_used_bytes"][1])[-1])
    assert fn["mem_peak_bytes"].noise == pytest.approx(step)
    assert fn["energy_j"].noise > 2 * fs["energy_j"].noise


def test_a_single_reading_cannot_tell():
    one = _series(1, np.array([50.0]), np.array([200.0]), np.array([1e9]))
    f = gpu_figures(_row(20.0, 0.05, 1e9, 50.0), one)
    assert math.isnan(f["util_mean_pct"].noise) and math.isnan(f["energy_j"].noise)
    c = Change("energy_j", f["energy_j"], Figure(40.0, 1.0))
    assert c.beyond_noise is None and c.phrase == "energy: cannot tell (too few readings)"


def _ramp_then_steady(n_ramp: int, n_steady: int, dt: float = 0.5) -> dict:
    """A start-up ramp to 70 GiB, then steady readings jittering by 64 MiB and a few percent."""
    rng = np.random.default_rng(1)
    mem = np.concatenate([np.linspace(0.5, 70, n_ramp), 70 + rng.uniform(0, 1 / 16, n_steady)]) * 1024**3
    util = np.concatenate([np.linspace(0, 90, n_ramp), 90 + rng.integers(-3, 4, n_steady)])
    power = np.concatenate([np.linspace(75, 600, n_ramp), 600 + rng.uniform(-4, 4, n_steady)])
    return _series(n_ramp + n_steady, util, power, mem, dt)


def _spacing_s(series: dict) -> float:
    t = series["util_pct"][0]
    return float(np.median(np.diff(t)))


def test_noise_comes_from_the_steady_part_not_the_ramp():
    s = _ramp_then_steady(6, 40)
    f = gpu_figures(_row(500.0 * 23, 23.0, float(s["mem_used_bytes"][1].max()), 80.0), s)
    # The ramp's 14 GiB steps are not noise: the peak is known to within its neighbours' steps.
    assert f["mem_peak_bytes"].noise < 0.1 * 1024**3
    # Utilisation jitters by a few percent around 90: its mean is known to about a point.
    assert f["util_mean_pct"].noise < 2.0
    # The start and end of a cell are clock stamps: its duration is known to what the same
    # work varies by between runs, not to the spacing of its readings.
    assert f["duration_s"].noise <= 0.01 * 23.0 < _spacing_s(s)


def _cycle(n: int, phase: int, high: float, low: float, period: int = 6) -> dict:
    """``n`` readings of a step cycle (``period`` ticks: half at ``high``, half at ``low``),
    the run cut at ``phase`` ticks into the cycle; power follows utilisation."""
    k = (np.arange(n) + phase) % period
    util = np.where(k < period // 2, high, low)
    return _series(n, util, 75.0 + 5.0 * util, np.full(n, 8 * 1024**3))


def test_a_periodic_load_cut_at_another_phase_is_not_a_change():
    """Consecutive readings are not independent: a step cycle's mean over a short run depends
    on where the run cut it. The same load read twice is not called a change; a real one is."""
    a, b = _cycle(15, 0, 95.0, 20.0), _cycle(15, 3, 95.0, 20.0)
    means = [float(s["util_pct"][1].mean()) for s in (a, b)]
    assert abs(means[1] - means[0]) > 5  # several points apart, the same load
    fa, fb = (gpu_figures(_row(1.5 * float(s["power_w"][1].mean()), 1.5, 8 * 1024**3, m), s)
              for m, s in zip(means, (a, b), strict=True))
    same = changes(fa, fb, ["util_mean_pct", "energy_j"])
    assert all(c.beyond_noise is not True for c in same), verdict(same)
    assert "higher" not in verdict(same) and "lower" not in verdict(same)
    rng = np.random.default_rng(3)
    lo, hi = (_series(15, u + rng.integers(-1, 2, 15), np.full(15, 300.0), np.full(15, 1e9))
              for u in (7.0, 70.0))
    moved = Change("util_mean_pct", gpu_figures(_row(450.0, 1.5, 1e9, 7.0), lo)["util_mean_pct"],
                   gpu_figures(_row(450.0, 1.5, 1e9, 70.0), hi)["util_mean_pct"])
    assert moved.beyond_noise is True and moved.phrase == "utilisation 900 % higher"


def test_a_pause_at_the_start_of_a_run_is_not_taken_for_a_ramp():
    """A load that pauses every few seconds (the simulated GPUs' evaluation pause) caught at the
    start of one run and not by the other: a flat low block is part of the load, not a ramp."""
    rng = np.random.default_rng(4)
    high = 93.0 + rng.integers(-3, 4, 15)
    paused = np.concatenate([40.0 + rng.integers(-5, 6, 6), high[:9]])
    a, b = (_series(15, u, 75.0 + 5.0 * u, np.full(15, 8 * 1024**3)) for u in (paused, high))
    fa, fb = (gpu_figures(_row(1.5 * float(s["power_w"][1].mean()), 1.5, 8 * 1024**3,
                               float(s["util_pct"][1].mean())), s) for s in (a, b))
    found = changes(fa, fb, ["util_mean_pct", "energy_j"])
    assert all(c.beyond_noise is not True for c in found), verdict(found)


def test_a_run_of_too_few_readings_cannot_tell():
    s = _ramp_then_steady(2, 1)  # three readings: nothing steady to judge by
    f = gpu_figures(_row(300.0, 1.0, 1e9, 30.0), s)
    assert math.isnan(f["util_mean_pct"].noise) and math.isnan(f["energy_j"].noise)
    c = Change("util_mean_pct", f["util_mean_pct"], Figure(60.0, 1.0))
    assert c.beyond_noise is None and "cannot tell" in c.phrase


@pytest.mark.parametrize("after", [120.0, 150.0, 190.0])
def test_never_the_same_when_the_noise_swamps_the_figure(after):
    """A noise as large as the figure itself cannot say "the same"; it says it cannot tell."""
    c = Change("energy_j", Figure(100.0, 60.0), Figure(after, 60.0))
    assert "the same" not in c.phrase and "cannot tell" in c.phrase


def test_repeats_give_the_noise_when_there_are_some():
    """Earlier runs of the same cell show how much it varies: a change inside that spread is not
    named; one outside it is, whatever each run's own noise."""
    runs = [Figure(v, 0.5) for v in (100.0, 110.0, 90.0, 105.0)]
    spread_noise = 2 * float(np.std([r.value for r in runs], ddof=1))
    inside = Change("energy_j", runs[-1], Figure(112.0, 0.5), repeats=runs)
    assert inside.noise == pytest.approx(spread_noise) and inside.beyond_noise is False
    assert inside.phrase == "energy the same"
    outside = Change("energy_j", runs[-1], Figure(140.0, 0.5), repeats=runs)
    assert outside.beyond_noise is True and outside.phrase == "33 % more energy"
    two = Change("energy_j", runs[-1], Figure(112.0, 0.5), repeats=runs[:2])  # too few repeats
    assert two.noise == pytest.approx(1.0)


def test_totals_take_values_from_the_summary_and_combine_noises():
    per = {0: {"energy_j": Figure(100, 3.0), "duration_s": Figure(2, 0.1),
               "mem_peak_bytes": Figure(5, 2.0), "util_mean_pct": Figure(50, 1.0)},
           1: {"energy_j": Figure(200, 4.0), "duration_s": Figure(2, 0.2),
               "mem_peak_bytes": Figure(7, 1.0), "util_mean_pct": Figure(70, 1.0)}}
    tot = total_figures(per, {"energy_j": 300.0, "duration_s": 2.0, "mem_peak_bytes": 7.0,
                              "util_mean_pct": 60.0})
    assert tot["energy_j"] == Figure(300.0, 5.0)
    assert tot["duration_s"] == Figure(2.0, 0.2) and tot["mem_peak_bytes"] == Figure(7.0, 2.0)
    assert tot["util_mean_pct"].noise == pytest.approx(math.sqrt(2) / 2)


# -- verdicts on both sides of the noise -----------------------------------------------------------
@pytest.mark.parametrize(("after", "beyond", "phrase"), [
    (112.0, True, "12 % more energy"),
    (88.0, True, "12 % less energy"),
    (104.9, False, "energy the same"),   # 4.9 J change, noise 2 + 3 = 5 J
    (105.1, True, "5.1 % more energy"),
])
def test_energy_change_against_the_noise(after, beyond, phrase):
    c = Change("energy_j", Figure(100.0, 2.0), Figure(after, 3.0))
    assert c.beyond_noise is beyond
    assert c.phrase == phrase


def test_verdict_reads_like_the_issue():
    a = {"energy_j": Figure(100.0, 1.0), "duration_s": Figure(10.0, 0.1),
         "mem_peak_bytes": Figure(8e9, 1e6), "util_mean_pct": Figure(80.0, 0.6)}
    b = {"energy_j": Figure(112.0, 1.0), "duration_s": Figure(10.3, 0.1),
         "mem_peak_bytes": Figure(8e9 + 5e5, 1e6), "util_mean_pct": Figure(80.5, 0.6)}
    assert verdict(changes(a, b)) == ("12 % more energy, 3 % longer, peak memory the same, "
                                      "utilisation the same")


def test_a_change_from_zero_has_no_percentage():
    c = Change("util_mean_pct", Figure(0.0, 0.5), Figure(40.0, 0.5))
    assert c.phrase == "utilisation higher (from 0)"


def test_a_metric_missing_on_one_side_is_said():
    c = Change("energy_j", Figure(math.nan, math.nan), Figure(10.0, 1.0))
    assert c.phrase == "energy not measured in both runs" and c.beyond_noise is None


def test_figures_round_trip_through_json():
    figs = RunFigures({"energy_j": Figure(1.5, 0.1), "util_mean_pct": Figure(math.nan, math.nan)},
                      {0: {"energy_j": Figure(1.5, 0.1)}, "0/1": {"energy_j": Figure(0.5, 0.05)}})
    back = RunFigures.from_json(figs.to_json())
    assert back.total["energy_j"] == Figure(1.5, 0.1)
    assert math.isnan(back.total["util_mean_pct"].value)
    assert back.per_gpu["0/1"]["energy_j"] == Figure(0.5, 0.05)


# -- the --fail-if grammar -------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "kind", "amount"), [
    ("energy_j>+5%", "relative", 5.0),
    ("duration_s >= -10 %", "relative", -10.0),
    ("mem_peak_bytes>+2GiB", "delta", 2 * 1024**3),
    ("mem_peak_bytes>70GiB", "value", 70 * 1024**3),
    ("energy_j>0.5kWh", "value", 0.5 * 3.6e6),
    ("duration_s>5min", "value", 300.0),
    ("util_mean_pct<-5pp", "delta", -5.0),
    ("temp_max_c>85C", "value", 85.0),
])
def test_bounds_parse(text, kind, amount):
    b = parse_bound(text)
    assert (b.kind, b.amount) == (kind, pytest.approx(amount))


@pytest.mark.parametrize(("text", "says"), [
    ("energy_j>>5%", "expected METRIC"),
    ("energy>+5%", "unknown metric 'energy'"),
    ("energy_j>5%", "needs a sign"),
    ("energy_j>+5", "needs a unit"),
    ("energy_j>+5GiB", "energy_j takes % or one of J, kJ"),
    ("", "expected METRIC"),
])
def test_bad_bounds_are_one_clear_error(text, says):
    with pytest.raises(BadArgumentError) as err:
        parse_bound(text)
    msg = str(err.value)
    assert says in msg and "\n" not in msg and "e.g." in msg


def test_relative_bound_against_base_values():
    b = parse_bound("energy_j>+5%")
    assert not b.broken(100.0, 105.0) and b.broken(100.0, 105.01)
    assert b.broken(0.0, 0.1)  # from nothing to something is beyond any relative growth
    assert b.broken(100.0, math.nan)  # a figure the gate cannot see breaks it
    assert parse_bound("duration_s<-20%").broken(10.0, 7.9)


_METRICS = st.sampled_from(sorted(METRIC_UNITS))
_OPS = st.sampled_from([">", ">=", "<", "<="])
_NUMBERS = st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False, allow_infinity=False)


@given(metric=_METRICS, op=_OPS, sign=st.sampled_from(["", "+", "-"]), number=_NUMBERS,
       data=st.data(), spaces=st.sampled_from(["", " "]))
def test_parser_round_trip(metric, op, sign, number, data, spaces):
    unit = data.draw(st.sampled_from(["%", *METRIC_UNITS[metric]]))
    text = f"{metric}{spaces}{op}{spaces}{sign}{number}{spaces}{unit}"
    if unit == "%" and not sign:
        with pytest.raises(BadArgumentError):
            parse_bound(text)
        return
    b = parse_bound(text)
    scale = 1.0 if unit == "%" else METRIC_UNITS[metric][unit]
    expected = float(number) * scale * (-1 if sign == "-" else 1)
    assert (b.metric, b.op) == (metric, op)
    assert b.kind == ("relative" if unit == "%" else "delta" if sign else "value")
    assert b.amount == pytest.approx(expected)


@given(st.text(max_size=40))
def test_parser_never_fails_otherwise(text):
    try:
        b = parse_bound(text)
    except BadArgumentError as exc:
        assert "\n" not in str(exc)
    else:
        assert b.metric in METRIC_UNITS


@given(base=st.floats(0, 1e12), pct=st.floats(-99, 1000), new=st.floats(0, 1e12))
def test_relative_greater_bound_breaks_exactly_above_the_limit(base, pct, new):
    b = parse_bound(f"energy_j>{'+' if pct >= 0 else '-'}{abs(pct):.6f}%")
    limit = base * (1 + b.amount / 100)
    assert b.broken(base, new) == (new > limit)


# -- cost ------------------------------------------------------------------------------------------
@pytest.fixture
def no_cost_config(monkeypatch):
    for name in ("NBGPU_PRICE_PER_KWH", "NBGPU_CURRENCY", "NBGPU_CARBON_G_PER_KWH"):
        monkeypatch.delenv(name, raising=False)
    config.reset()
    yield
    config.reset()


def test_only_kwh_until_configured(no_cost_config):
    c = cost.cost_of(3.6e6)
    assert c.energy_kwh == 1.0 and math.isnan(c.cost) and math.isnan(c.co2_g)
    assert c.text() == "1.00 kWh"
    assert c.columns() == {"energy_kwh": 1.0}


def test_configured_price_and_carbon(no_cost_config):
    cost.configure(price_per_kwh=0.30, currency="EUR", carbon_g_per_kwh=400)
    c = cost.cost_of(7.2e6)
    assert (c.cost, c.co2_g, c.currency) == (pytest.approx(0.6), pytest.approx(800.0), "EUR")
    assert c.text() == "2.00 kWh · 0.600 EUR · 800 g CO₂"


def test_environment_settings_and_bad_values(no_cost_config, monkeypatch):
    monkeypatch.setenv("NBGPU_PRICE_PER_KWH", "0.25")
    monkeypatch.setenv("NBGPU_CURRENCY", "CHF")
    c = cost.cost_of(3.6e6)  # the environment is read when the settings are made
    assert (c.cost, c.currency, math.isnan(c.co2_g)) == (pytest.approx(0.25), "CHF", True)
    cost.configure(price_per_kwh=0.5)
    assert cost.cost_of(3.6e6).cost == pytest.approx(0.5)  # configure wins over the environment
    with pytest.raises(BadArgumentError, match="price_per_kwh must be a number >= 0"):
        cost.configure(price_per_kwh=-1)
    config.reset()
    monkeypatch.setenv("NBGPU_CARBON_G_PER_KWH", "lots")
    with pytest.raises(BadArgumentError, match="NBGPU_CARBON_G_PER_KWH"):
        cost.cost_of(3.6e6)


# -- units as a person reads them ------------------------------------------------------------------
def test_compare_gives_utilisation_changes_in_points_and_cost_only_with_a_price(no_cost_config):
    from nbgpu.cli.compare import _change_cells, table_rows

    c = Change("util_mean_pct", Figure(73.0, 0.6), Figure(77.0, 0.6))
    before, after, change, noise = _change_cells(c)
    assert (before, after) == ("73 %", "77 %")
    assert change == "+4 pp (+5.5 %)" and noise == "changed (± 1.2 pp)"

    class _Side:  # the two figures table_rows reads
        def __init__(self, energy_j):
            figs = {"energy_j": Figure(energy_j, 1.0)}
            self.figures = RunFigures(figs, {0: figs})
            self.totals = {"energy_j": energy_j}

    rows = table_rows(_Side(3.6e6), _Side(7.2e6))
    assert rows[-1][1] == "energy in kWh" and rows[-1][2][:2] == ["1.00 kWh", "2.00 kWh"]
    cost.configure(price_per_kwh=0.30, currency="EUR")
    assert table_rows(_Side(3.6e6), _Side(7.2e6))[-1][1] == "cost"


def test_cell_summary_headers_name_no_unit_their_cells_do_not_use():
    from nbgpu.profiles.render import summary_html

    row = {"gpu": 0, "name": "NVIDIA H200 (simulated)", "duration_s": 2.0, "mem_start_bytes": 2**30,
           "mem_end_bytes": 2**31, "mem_peak_bytes": 2**31, "mem_delta_bytes": 2**30, "util_mean_pct": 50.0,
           "util_max_pct": 90.0, "power_mean_w": 300.0, "power_max_w": 400.0, "energy_j": 8200.0,
           "energy_source": "counter", "temp_max_c": 60.0, "throttle_reasons": "", "status": "ok"}
    page = summary_html([row, dict(row, gpu=1, mem_start_bytes=2**20, mem_end_bytes=2**21)])
    heads = re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", page)
    assert heads and not [h for h in heads if re.search(r"\((?:J|W|%|°C|GiB|MiB|GiB/MiB)\)", h)], heads
    assert "8.2 kJ" in page


def test_a_few_ms_on_a_stamped_cell_is_no_change_and_a_tiny_change_is_said_in_its_unit():
    """The same 1.5 s cell run again 3 ms longer is "duration the same" (on a busy machine the
    same work varies by that), and a peak-memory change that is real but rounds to 0 % is said
    in MiB, never as "0 % lower"."""
    steady = _series(15, np.full(15, 50.0), np.full(15, 300.0), np.full(15, 70 * 1024**3))
    a = gpu_figures(_row(450.0, 1.5, 70 * 1024**3, 50.0), steady)
    b = gpu_figures(_row(450.0, 1.503, 70 * 1024**3 - 8 * MIB, 50.0), steady)
    said = {c.metric: c.phrase for c in changes(a, b)}
    assert said["duration_s"] == "duration the same"
    assert said["mem_peak_bytes"] == "peak memory 8.0 MiB lower"
    longer = gpu_figures(_row(450.0, 2.25, 70 * 1024**3, 50.0), steady)
    assert {c.metric: c.phrase for c in changes(a, longer)}["duration_s"] == "50 % longer"
