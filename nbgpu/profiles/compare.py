"""Compare two runs (two cells, two recordings): each figure's change and whether it is real.

A figure of one run comes with its noise, a half-width computed from that run's own
per-tick readings; a change counts only when it exceeds the two runs' noise added up:

- ``duration_s``: the median spacing of the run's readings (its figures are resolved no
  finer than one tick).
- ``util_mean_pct``: two standard errors of the mean of the per-tick readings, plus 0.5
  (NVML reports whole percents).
- ``energy_j``: the energy times two relative standard errors of the mean power, plus the
  mean power over one power-sample spacing (an edge can move by one sample).
- ``mem_peak_bytes``: the largest step between consecutive memory readings (a peak between
  two readings is missed by at most that), and at least 1 MiB.

With fewer than two readings a noise is NaN and the verdict says it cannot tell.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .energy import median

if TYPE_CHECKING:
    import pandas as pd

    from .capture import Capture

MIB = 1024**2
COMPARED = ("energy_j", "duration_s", "mem_peak_bytes", "util_mean_pct")
NOISE_METRICS = ("util_pct", "power_w", "mem_used_bytes")  # the readings a noise comes from
# Words of a verdict: (more, less, the same).
_WORDS = {
    "energy_j": ("{p} more energy", "{p} less energy", "energy the same"),
    "duration_s": ("{p} longer", "{p} shorter", "duration the same"),
    "mem_peak_bytes": ("peak memory {p} higher", "peak memory {p} lower", "peak memory the same"),
    "util_mean_pct": ("utilisation {p} higher", "utilisation {p} lower", "utilisation the same"),
}
_NAMES = {"energy_j": "energy", "duration_s": "duration", "mem_peak_bytes": "peak memory",
          "util_mean_pct": "utilisation"}

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
            return {k: [_finite(f.value), _finite(f.noise)] for k, f in figs.items()}
        return {"total": pack(self.total), "per_gpu": [[g, pack(f)] for g, f in self.per_gpu.items()]}

    @classmethod
    def from_json(cls, data: dict) -> RunFigures:
        def unpack(d: dict) -> dict[str, Figure]:
            return {k: Figure(_nan(v[0]), _nan(v[1])) for k, v in d.items()}
        return cls(unpack(data.get("total", {})), {g: unpack(f) for g, f in data.get("per_gpu", [])})


def _finite(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def _nan(v: object) -> float:
    return math.nan if v is None else float(v)


def _num(v: object) -> float:
    return float(v) if isinstance(v, (int, float, np.number)) and not isinstance(v, bool) else math.nan


def _spacing(t: np.ndarray) -> float:
    return median(t[1:] - t[:-1]) if len(t) >= 2 else math.nan


def _sem2(v: np.ndarray) -> float:
    """Two standard errors of the mean of ``v`` (NaN below two readings)."""
    if len(v) < 2:
        return math.nan
    return 2.0 * float(v.std(ddof=1)) / math.sqrt(len(v))


def gpu_figures(row: Mapping[str, object], series: Series) -> dict[str, Figure]:
    """The compared figures of one GPU: values from its summary ``row``, noise from its readings.

    ``series`` maps a metric (``util_pct``, ``power_w``, ``mem_used_bytes``) to (epoch
    seconds, values) inside the run.
    """
    empty = (np.empty(0), np.empty(0))
    ut, uv = series.get("util_pct", empty)
    pt, pv = series.get("power_w", empty)
    mt, mv = series.get("mem_used_bytes", empty)
    ticks = [s for s in (_spacing(ut), _spacing(mt), _spacing(pt)) if not math.isnan(s)]
    energy = _num(row.get("energy_j"))
    mean_p = float(pv.mean()) if len(pv) >= 2 else math.nan
    energy_noise = (abs(energy) * _sem2(pv) / mean_p + mean_p * _spacing(pt)) if mean_p > 0 else math.nan
    util_noise = _sem2(uv) + 0.5
    steps = float(np.abs(mv[1:] - mv[:-1]).max()) if len(mv) >= 2 else 0.0
    mem_noise = max(MIB, steps) if len(mv) else math.nan
    return {
        "energy_j": Figure(energy, energy_noise),
        "duration_s": Figure(_num(row.get("duration_s")), max(ticks) if ticks else math.nan),
        "mem_peak_bytes": Figure(_num(row.get("mem_peak_bytes")), mem_noise),
        "util_mean_pct": Figure(_num(row.get("util_mean_pct")), util_noise),
    }


def total_figures(per_gpu: Mapping[object, Mapping[str, Figure]],
                  totals: Mapping[str, object]) -> dict[str, Figure]:
    """Figures over all GPUs: values from ``totals`` (the summary's combined row), noises combined.

    Sums (energy) add noises in quadrature, the mean of utilisation divides that by the
    number of GPUs, maxima (duration, peak memory) take the largest noise.
    """
    figs = [f for f in per_gpu.values() if f]

    def noises(metric: str) -> list[float]:
        return [f[metric].noise for f in figs if metric in f]

    def quad(metric: str) -> float:
        n = noises(metric)
        return math.sqrt(sum(x * x for x in n)) if n else math.nan

    def largest(metric: str) -> float:
        n = noises(metric)
        return max(n) if n and not any(math.isnan(x) for x in n) else math.nan

    k = max(len(figs), 1)
    return {
        "energy_j": Figure(_num(totals.get("energy_j")), quad("energy_j")),
        "duration_s": Figure(_num(totals.get("duration_s")), largest("duration_s")),
        "mem_peak_bytes": Figure(_num(totals.get("mem_peak_bytes")), largest("mem_peak_bytes")),
        "util_mean_pct": Figure(_num(totals.get("util_mean_pct")), quad("util_mean_pct") / k),
    }


def capture_figures(cap: Capture) -> RunFigures:
    """The compared figures of a finished capture (its summary and its own readings)."""
    rows = cap.summary_rows
    read = cap.series(NOISE_METRICS)
    per_gpu = {row["gpu"]: gpu_figures(row, read.get(row["gpu"], {})) for row in rows}
    return RunFigures(total_figures(per_gpu, cap.totals), per_gpu)


def frame_series(df: pd.DataFrame) -> dict[object, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Per-GPU (epoch seconds, values) of the compared metrics of a run's DataFrame, NaN dropped.

    Rows written forward-filled repeat a reading; repeats of the same value are kept, as
    the frame cannot tell them apart from readings that did not change.
    """
    out: dict[object, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    if not len(df):
        return out
    import pandas as pd

    t_all = ((df["time"] - pd.Timestamp(0, tz="UTC")).dt.total_seconds()).to_numpy()
    gpus = df["gpu"].to_numpy()
    for g in dict.fromkeys(gpus.tolist()):
        rows = gpus == g
        per = {}
        for m in ("util_pct", "power_w", "mem_used_bytes"):
            if m in df.columns:
                v = df[m].to_numpy(dtype=np.float64, na_value=np.nan)[rows]
                t = t_all[rows]
                ok = ~np.isnan(v)
                per[m] = (t[ok], v[ok])
        out[g] = per
    return out


@dataclass(frozen=True)
class Change:
    """How one figure moved from run A (``before``) to run B (``after``)."""

    metric: str
    before: Figure
    after: Figure

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
        return self.before.noise + self.after.noise

    @property
    def beyond_noise(self) -> bool | None:
        """True when the change exceeds both runs' noise added up; None when it cannot tell."""
        if not (math.isfinite(self.delta) and math.isfinite(self.noise)):
            return None
        return abs(self.delta) > self.noise

    @property
    def phrase(self) -> str:
        """``12 % more energy``, ``peak memory the same``, or why it cannot tell."""
        if not math.isfinite(self.delta):
            return f"{_NAMES[self.metric]} not measured in both runs"
        if self.beyond_noise is None:
            return f"{_NAMES[self.metric]}: too few readings to tell"
        more, less, same = _WORDS[self.metric]
        if not self.beyond_noise:
            return same
        words = more if self.delta > 0 else less
        pct = self.pct
        if not math.isfinite(pct):  # from zero: no percentage to give
            return words.replace("{p} ", "").replace(" {p}", "") + " (from 0)"
        return words.format(p=fmt_change_pct(abs(pct)))


def fmt_change_pct(p: float) -> str:
    """``12 %``, ``3 %``, ``0.4 %`` (a sign only where given)."""
    if not math.isfinite(p):
        return "–"
    digits = 0 if abs(p) >= 9.5 else 1
    text = f"{p:.{digits}f}"
    if digits and text.endswith(".0"):
        text = text[:-2]
    return f"{text} %"


def changes(a: Mapping[str, Figure], b: Mapping[str, Figure],
            metrics: Iterable[str] = COMPARED) -> list[Change]:
    """The changes from figures ``a`` to ``b`` of each compared metric present in both."""
    return [Change(m, a[m], b[m]) for m in metrics if m in a and m in b]


def verdict(found: Iterable[Change]) -> str:
    """``12 % more energy, 3 % longer, peak memory the same, utilisation the same``."""
    return ", ".join(c.phrase for c in found)
