"""Energy of a recorded run from forward-filled rows: counter where it moved, power elsewhere.

Each case writes the rows as the recorder does (filled JSON lines) and reads the energy the
way ``nbgpu record`` and ``nbgpu report`` both do: ``load_run`` then ``summarize_run``.
"""

from __future__ import annotations

import datetime as dt
import math

import numpy as np
import pytest

from nbgpu.cli.report import summarize_run
from nbgpu.files import json_line, jsonl_record
from nbgpu.runfile import load_run

T0 = 1.9e9


def energy_of(tmp_path, t: np.ndarray, counter_j: np.ndarray, power_w: np.ndarray) -> float:
    """Joules ``record``/``report`` give for one GPU whose rows are filled as the recorder fills them."""
    last: dict = {}
    lines = []
    for when, e, p in zip(t, counter_j, power_w, strict=True):
        last.update({k: float(v) for k, v in (("energy_j", e), ("power_w", p)) if not math.isnan(v)})
        stamp = dt.datetime.fromtimestamp(T0 + when, dt.timezone.utc).isoformat()
        lines.append(json_line(jsonl_record(stamp, 0, {"util_pct": 50.0, **last})))
    path = tmp_path / "run.jsonl"
    path.write_text("\n".join(lines) + "\n")
    (row,) = summarize_run(load_run(str(path))).rows
    return row["energy_j"]


def test_repeated_counter_values_are_one_reading_and_edges_use_power(tmp_path):
    t = np.arange(0.0, 10.0, 0.5)
    power_w = np.full(len(t), 100.0)
    # the counter was read at 2 s (1200 J) and at 7 s (1700 J); rows repeat it in between
    counter_j = np.where(t < 2, np.nan, np.where(t < 7, 1200.0, 1700.0))
    # 500 J between the readings, plus 2 s before and 2.5 s after at 100 W
    assert energy_of(tmp_path, t, counter_j, power_w) == pytest.approx(500 + 200 + 250)


def test_a_counter_read_once_falls_back_to_integrated_power(tmp_path):
    t = np.arange(0.0, 3.0, 0.5)
    assert energy_of(tmp_path, t, np.full(len(t), 5e6), np.full(len(t), 300.0)) == pytest.approx(750.0)


def test_no_power_and_no_counter_is_unknown_not_zero(tmp_path):
    t = np.arange(0.0, 3.0, 0.5)
    assert np.isnan(energy_of(tmp_path, t, np.full(len(t), np.nan), np.full(len(t), np.nan)))
