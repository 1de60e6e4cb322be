"""Energy of a recorded run from forward-filled rows: counter where it moved, power elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from nbgpu.cli.status import run_energy_j


def test_repeated_counter_values_are_one_reading_and_edges_use_power():
    t = np.arange(0.0, 10.0, 0.5)
    power_w = np.full(len(t), 100.0)
    # the counter was read at 2 s (1200 J) and at 7 s (1700 J); rows repeat it in between
    counter_j = np.where(t < 2, np.nan, np.where(t < 7, 1200.0, 1700.0))
    # 500 J between the readings, plus 2 s before and 2.5 s after at 100 W
    assert run_energy_j(t, counter_j, power_w) == pytest.approx(500 + 200 + 250)


def test_a_counter_read_once_falls_back_to_integrated_power():
    t = np.arange(0.0, 3.0, 0.5)
    assert run_energy_j(t, np.full(len(t), 5e6), np.full(len(t), 300.0)) == pytest.approx(750.0)


def test_no_power_and_no_counter_is_unknown_not_zero():
    t = np.arange(0.0, 3.0, 0.5)
    assert np.isnan(run_energy_j(t, np.full(len(t), np.nan), np.full(len(t), np.nan)))
