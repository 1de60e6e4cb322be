"""The bounds of ``nbgpu compare --fail-if``, a regression gate between a base run and a new one
(grammar and units: docs/compare.md)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import BadArgumentError

_BYTES = {"B": 1.0, "KiB": 1024.0, "MiB": 1024.0**2, "GiB": 1024.0**3, "TiB": 1024.0**4,
          "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}
_SECONDS = {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_JOULES = {"J": 1.0, "kJ": 1e3, "MJ": 1e6, "Wh": 3600.0, "kWh": 3.6e6}

# The run figures a bound may name (totals over all GPUs) and the units each takes.
METRIC_UNITS: dict[str, dict[str, float]] = {
    "duration_s": _SECONDS,
    "energy_j": _JOULES,
    "mem_peak_bytes": _BYTES,
    "mem_delta_bytes": _BYTES,
    "util_mean_pct": {"pp": 1.0},
    "util_max_pct": {"pp": 1.0},
    "power_mean_w": {"W": 1.0, "kW": 1e3},
    "power_max_w": {"W": 1.0, "kW": 1e3},
    "temp_max_c": {"C": 1.0, "°C": 1.0},
}
EXAMPLE = '"energy_j>+5%"'

# Matched against the stripped text, with no two runs of spaces side by side, so a failing
# match backtracks over each run of spaces once (linear time, however many spaces).
_PATTERN = re.compile(r"(?P<metric>[A-Za-z_][A-Za-z0-9_]*)\s*(?P<op>>=|<=|>|<)\s*"
                      r"(?:(?P<sign>[+-])\s*)?(?P<num>(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?)\s*"
                      r"(?P<unit>%|[A-Za-z°]+)?")


@dataclass(frozen=True)
class Bound:
    """One parsed ``--fail-if`` bound; ``amount`` is in the metric's base unit (or % if relative)."""

    text: str
    metric: str
    op: str
    kind: str  # "relative" | "delta" | "value"
    amount: float

    def limit(self, base: float) -> float:
        """The new run's figure at which the bound is reached, given the base's figure."""
        if self.kind == "relative":
            return base + abs(base) * self.amount / 100.0
        if self.kind == "delta":
            return base + self.amount
        return self.amount

    def broken(self, base: float, new: float) -> bool:
        """Whether the new figure breaks the bound (a missing figure always does)."""
        limit = self.limit(base)
        if not (math.isfinite(new) and math.isfinite(limit)):
            return True
        return {">": new > limit, ">=": new >= limit, "<": new < limit, "<=": new <= limit}[self.op]


def _fail(text: str, why: str) -> BadArgumentError:
    return BadArgumentError(f"bad --fail-if {text!r}: {why}; e.g. {EXAMPLE} (see docs/compare.md)")


def parse_bound(text: str) -> Bound:
    """Parse one ``--fail-if`` bound; raises ``BadArgumentError`` saying what is wrong."""
    m = _PATTERN.fullmatch(text.strip())
    if m is None:
        raise _fail(text, "expected METRIC, one of > >= < <=, then a bound such as +5%, "
                    "+2GiB or 300s")
    metric, op, sign, unit = m["metric"], m["op"], m["sign"] or "", m["unit"]
    if metric not in METRIC_UNITS:
        raise _fail(text, f"unknown metric {metric!r}; use one of {', '.join(METRIC_UNITS)}")
    units = METRIC_UNITS[metric]
    if unit == "%" and not sign:
        raise _fail(text, "a relative bound needs a sign (+5% or -5%)")
    if unit is None:
        raise _fail(text, f"the bound needs a unit: % or one of {', '.join(units)}")
    if unit not in units and unit != "%":
        raise _fail(text, f"{metric} takes % or one of {', '.join(units)}, not {unit!r}")
    amount = float(m["num"]) * (1.0 if unit == "%" else units[unit]) * (-1.0 if sign == "-" else 1.0)
    if not math.isfinite(amount):
        raise _fail(text, "the bound is not a finite number")
    return Bound(text, metric, op, "relative" if unit == "%" else "delta" if sign else "value", amount)
