"""Compare two runs (two cells, two recordings): each figure's change and whether it is beyond
its noise, and the bounds of the ``nbgpu compare --fail-if`` gate (defined in docs/compare.md)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import BadArgumentError
from ..files import json_value
from ..units import MIB, as_float, fmt_bytes, fmt_duration, fmt_energy
from .energy import EMPTY

if TYPE_CHECKING:
    from .capture import Capture

MIN_READINGS = 4  # fewer readings of a metric than this: its noise is unknown
MIN_REPEATS = 3  # earlier runs needed before their spread is a noise
STAMP_S = 0.001  # resolution of a start or end taken from the clock
# Without repeats, what the same stamped work varies by between two runs (the kernel's and the
# profiler's own moments around it, a busy machine): a stamp's 1 ms is not that.
RERUN_SPREAD = 0.01
RESOLVES = 0.25  # a noise above this fraction of the base figure cannot call a change "none"
COMPARED = ("energy_j", "duration_s", "mem_peak_bytes", "util_mean_pct")
NOISE_METRICS = ("util_pct", "power_w", "mem_used_bytes")  # the readings a noise comes from
# Words of a verdict: (more, less, the same).
_WORDS = {
    "energy_j": ("{p} more energy", "{p} less energy", "energy the same"),
    "duration_s": ("{p} longer", "{p} shorter", "duration the same"),
    "mem_peak_bytes": ("peak memory {p} higher", "peak memory {p} lower", "peak memory the same"),
    "util_mean_pct": ("utilisation {p} higher", "utilisation {p} lower", "utilisation the same"),
}
_NAMES = {m: words[2].removesuffix(" the same") for m, words in _WORDS.items()}

Series = Mapping[str, tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Figure:
    """One figure of one run and its noise (same unit; NaN when unknown)."""

    value: float
    noise: float


@dataclass(frozen=True)
class RunFigures:
    """The compared figures of one run: over all GPUs (``total``) and per GPU."""

    total: dict[str, Figure]
    per_gpu: dict[object, dict[str, Figure]]

    def to_json(self) -> dict:
        """Plain data (for the persistent history file)."""
        def pack(figs: dict[str, Figure]) -> dict:
            return {k: [json_value(float(f.value)), json_value(float(f.noise))] for k, f in figs.items()}
        return {"total": pack(self.total), "per_gpu": [[g, pack(f)] for g, f in self.per_gpu.items()]}

    @classmethod
    def from_json(cls, data: dict) -> RunFigures:
        def unpack(d: dict) -> dict[str, Figure]:
            return {k: Figure(as_float(v[0]), as_float(v[1])) for k, v in d.items()}
        return cls(unpack(data.get("total", {})), {g: unpack(f) for g, f in data.get("per_gpu", [])})


def _spacing(t: np.ndarray) -> float:
    return float(np.median(t[1:] - t[:-1])) if len(t) >= 2 else math.nan


def jitter(v: np.ndarray) -> float:
    """The standard deviation of ``v``'s steady part, from the median absolute difference of
    consecutive readings (a ramp's few large steps do not move it); NaN below MIN_READINGS."""
    if len(v) < MIN_READINGS:
        return math.nan
    return 1.4826 * float(np.median(np.abs(np.diff(v)))) / math.sqrt(2.0)


def _steady(v: np.ndarray) -> np.ndarray:
    """``v`` without its start-up ramp: the leading readings outside the range of its second half,
    each step the same way (a flat block, a pause, is no ramp). The end is kept: a cycling load's
    pause caught there looks like a wind-down, and it is noise."""
    tail = v[len(v) // 2:]
    inside, steps, first = (v >= tail.min()) & (v <= tail.max()), np.sign(np.diff(v)), 0
    while first < len(v) - 1 and not inside[first] and steps[first] != 0 and steps[first] == steps[0]:
        first += 1
    return v[first:] if len(v) - first >= MIN_READINGS else v


def _sem2(v: np.ndarray) -> float:
    """Two standard errors of the mean of ``v``, its readings taken as correlated (NaN below
    MIN_READINGS)."""
    if len(v) < MIN_READINGS:
        return math.nan
    s = _steady(np.asarray(v, dtype=np.float64))
    d = s - s.mean()
    var = float(d @ d) / len(s)
    rho = float(d[:-1] @ d[1:]) / (var * len(s)) if var > 0 else 0.0
    rho = min(max(rho, 0.0), 1.0)
    n_eff = max(1.0, len(s) * (1.0 - rho) / (1.0 + rho))
    return 2.0 * max(math.sqrt(var), jitter(v)) / math.sqrt(n_eff)


def _peak_step(v: np.ndarray) -> float:
    """The larger step between the peak reading and its neighbours (0 for one reading)."""
    i = int(np.argmax(v))
    return float(np.abs(v[max(i - 1, 0):i + 2] - v[i]).max())


def gpu_figures(row: Mapping[str, object], series: Series, stamped: bool = True) -> dict[str, Figure]:
    """The compared figures of one GPU: values from its summary ``row``, noise from its readings."""
    ut, uv = series.get("util_pct", EMPTY)
    pt, pv = series.get("power_w", EMPTY)
    mt, mv = series.get("mem_used_bytes", EMPTY)
    ticks = [s for s in (_spacing(ut), _spacing(mt), _spacing(pt)) if not math.isnan(s)]
    energy = as_float(row.get("energy_j"))
    mean_p = float(pv.mean()) if len(pv) >= MIN_READINGS else math.nan
    energy_noise = (abs(energy) * _sem2(pv) / mean_p + mean_p * _spacing(pt)) if mean_p > 0 else math.nan
    util_noise = _sem2(uv) + 0.5
    mem_noise = max(MIB, _peak_step(mv)) if len(mv) >= 2 else math.nan
    duration = as_float(row.get("duration_s"))
    duration_noise = (max(STAMP_S, RERUN_SPREAD * duration) if stamped and math.isfinite(duration)
                      else STAMP_S if stamped else (max(ticks) if ticks else math.nan))
    return {
        "energy_j": Figure(energy, energy_noise),
        "duration_s": Figure(duration, duration_noise),
        "mem_peak_bytes": Figure(as_float(row.get("mem_peak_bytes")), mem_noise),
        "util_mean_pct": Figure(as_float(row.get("util_mean_pct")), util_noise),
    }


def total_figures(per_gpu: Mapping[object, Mapping[str, Figure]],
                  totals: Mapping[str, object]) -> dict[str, Figure]:
    """Figures over all GPUs: values from ``totals`` (the summary's combined row), noises combined."""
    figs = [f for f in per_gpu.values() if f]
    out = {}
    for metric in COMPARED:  # maxima take the largest noise (NaN if one is unknown); sums add in
        n = np.array([f[metric].noise for f in figs if metric in f])  # quadrature, a mean divides by the GPUs
        noise = (math.nan if not len(n) else float(n.max()) if metric in ("duration_s", "mem_peak_bytes")
                 else float(np.sqrt(n @ n)) / (len(figs) if metric == "util_mean_pct" else 1))
        out[metric] = Figure(as_float(totals.get(metric)), noise)
    return out


def capture_figures(cap: Capture) -> RunFigures:
    """The compared figures of a finished capture (its summary and its own readings)."""
    read = cap.series(NOISE_METRICS)
    per_gpu = {row["gpu"]: gpu_figures(row, read.get(row["gpu"], {})) for row in cap.summary_rows}
    return RunFigures(total_figures(per_gpu, cap.totals), per_gpu)


@dataclass(frozen=True)
class Change:
    """How one figure moved from run A (``before``) to run B (``after``)."""

    metric: str
    before: Figure
    after: Figure
    repeats: tuple[Figure, ...] = ()
    """Earlier runs of the same work (their spread is the noise when there are enough)."""

    @property
    def delta(self) -> float:
        return self.after.value - self.before.value

    @property
    def pct(self) -> float:
        """The change in % of A's value (NaN when A is 0 or unknown)."""
        a = self.before.value
        return 100.0 * self.delta / abs(a) if a and math.isfinite(a) else math.nan

    @property
    def noise(self) -> float:
        """Both runs' noise added up, or the repeats' spread (two standard deviations) if larger."""
        own = self.before.noise + self.after.noise
        values = [r.value for r in self.repeats if math.isfinite(r.value)]
        if len(values) < MIN_REPEATS:
            return own
        spread = 2.0 * float(np.std(values, ddof=1))
        return max(own, spread) if math.isfinite(own) else spread

    @property
    def beyond_noise(self) -> bool | None:
        """True when the change exceeds the noise; False when it does not and the noise resolves
        a quarter of the base figure; None when it cannot tell."""
        noise = self.noise
        if not (math.isfinite(self.delta) and math.isfinite(noise)):
            return None
        if abs(self.delta) > noise:
            return True
        base = abs(self.before.value)
        return False if noise <= RESOLVES * base or noise == 0 else None

    @property
    def phrase(self) -> str:
        """``12 % more energy``, ``peak memory the same``, or why it cannot tell."""
        if not math.isfinite(self.delta):
            return f"{_NAMES[self.metric]} not measured in both runs"
        if self.beyond_noise is None:
            why = "too few readings" if not math.isfinite(self.noise) else "too noisy"
            return f"{_NAMES[self.metric]}: cannot tell ({why})"
        more, less, same = _WORDS[self.metric]
        if not self.beyond_noise:
            return same
        words = more if self.delta > 0 else less
        pct = self.pct
        if not math.isfinite(pct):  # from zero: no percentage to give
            return words.replace("{p} ", "").replace(" {p}", "") + " (from 0)"
        if abs(pct) < 0.05:  # a percentage that would read "0 %": the change itself, in its unit
            fmt = {"mem_peak_bytes": fmt_bytes, "duration_s": fmt_duration, "energy_j": fmt_energy}
            return words.format(p=fmt.get(self.metric, lambda d: f"{d:.1f} pp")(abs(self.delta)))
        return words.format(p=fmt_change_pct(abs(pct)))


def fmt_change_pct(p: float) -> str:
    """``12 %``, ``3 %``, ``0.4 %`` (a sign only where given)."""
    if not math.isfinite(p):
        return "–"
    return (f"{p:.0f}" if abs(p) >= 9.5 else f"{p:.1f}".removesuffix(".0")) + " %"


def changes(a: Mapping[str, Figure], b: Mapping[str, Figure],
            metrics: Iterable[str] = COMPARED,
            repeats: Iterable[Mapping[str, Figure]] = ()) -> list[Change]:
    """The changes from figures ``a`` to ``b`` of each compared metric present in both;
    ``repeats``: the figures of earlier runs of the same work (``a`` among them or not)."""
    earlier = list(repeats)
    return [Change(m, a[m], b[m], tuple(r[m] for r in earlier if m in r))
            for m in metrics if m in a and m in b]


def verdict(found: Iterable[Change]) -> str:
    """``12 % more energy, 3 % longer, peak memory the same, utilisation the same``."""
    return ", ".join(c.phrase for c in found)


# The bounds of ``nbgpu compare --fail-if``: grammar and units in docs/compare.md.
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
