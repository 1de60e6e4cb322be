"""The one formatter: binary memory units, durations, energy; missing values never read as 0."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from nbgpu.units import (
    GIB,
    MIB,
    MISSING,
    fmt_bytes,
    fmt_celsius,
    fmt_duration,
    fmt_energy,
    fmt_pct,
    fmt_used_of,
    fmt_watts,
    gib,
)

PACKAGE = Path(__file__).resolve().parents[1] / "nbgpu"


def test_bytes_read_in_binary_units():
    assert fmt_bytes(41.25 * GIB) == "41.2 GiB"
    assert fmt_bytes(310 * MIB) == "310.0 MiB"
    assert fmt_bytes(512) == "512 B"
    assert fmt_bytes(3 * GIB, signed=True) == "+3.0 GiB"
    assert fmt_bytes(-3 * GIB, signed=True) == "-3.0 GiB"


def test_gib_pairs_keep_one_decimal_only_below_ten():
    assert gib(0.5 * GIB) == "0.5"
    assert gib(71.4 * GIB) == "71"
    assert gib(71.4 * GIB, digits=1) == "71.4"
    assert fmt_used_of(40 * GIB, 140 * GIB) == "40/140"
    assert fmt_used_of(9.8 * GIB, None) == "9.8"


@pytest.mark.parametrize("missing", [None, math.nan, math.inf, "12", True])
def test_missing_values_read_as_a_dash_in_every_formatter(missing):
    for fmt in (fmt_bytes, gib, fmt_duration, fmt_energy, fmt_pct, fmt_watts, fmt_celsius):
        assert fmt(missing) == MISSING, fmt.__name__
    assert fmt_used_of(missing, 140 * GIB) == MISSING


def test_durations_energy_power_and_temperature():
    assert [fmt_duration(s) for s in (2.04, 12.5, 72, 3780)] == ["2.04s", "12.5s", "1m12s", "1h03m"]
    assert [fmt_energy(j) for j in (920, 44_100, 1.2e6)] == ["920 J", "44.1 kJ", "1.20 MJ"]
    # A space before every unit, as the panel writes "94 %" and compare "+5.5 %".
    assert (fmt_pct(87.4), fmt_watts(612.2), fmt_celsius(70.6)) == ("87 %", "612 W", "71 °C")


# Ways a module formats bytes itself: a GiB divisor, or decimal GB/MB text after a number.
OWN_FORMATTING = re.compile(r"/\s*2\s*\*\*\s*30|/\s*1024\s*\*\*\s*3|\}\s*[GM]B\b")


def test_no_module_formats_bytes_itself():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "units.py":
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OWN_FORMATTING.search(line):
                offenders.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
            if re.match(r"\s*def _?fmt_(bytes|duration|energy|pct|watts)\b", line):
                offenders.append(f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}")
    assert offenders == []
