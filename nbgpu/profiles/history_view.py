"""``nbgpu.history()`` as a person reads it: a DataFrame whose notebook display is a short
table with units (the raw frame is ``.raw()``, or any selection of it). Imported on the
first ``history()`` call, so pandas stays out of ``import nbgpu``."""

from __future__ import annotations

import pandas as pd

from ..units import fmt_bytes, fmt_duration, fmt_energy, fmt_pct, fmt_watts


def _text(v: object) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)


SHOWN = {"In": ("execution_count", _text), "first line": ("first_line", _text),  # heading: (column, format)
         "duration": ("duration_s", fmt_duration), "util mean": ("util_mean_pct", fmt_pct),
         "peak memory": ("mem_peak_bytes", fmt_bytes), "power mean": ("power_mean_w", fmt_watts),
         "energy": ("energy_j", fmt_energy), "status": ("status", _text), "alerts": ("alert_rules", _text)}


class HistoryFrame(pd.DataFrame):
    """``nbgpu.history()``: shown as a short table with units; ``raw()`` is the plain frame."""

    @property
    def _constructor(self):  # any selection or computation gives a plain DataFrame
        return pd.DataFrame

    def raw(self) -> pd.DataFrame:
        """Every column, values in base units (bytes, seconds, joules), as a plain DataFrame."""
        return pd.DataFrame(self)

    def readable(self) -> pd.DataFrame:
        """The table a notebook shows: one row per cell, units in every value."""
        out = {head: [fmt(v) for v in self[col]] for head, (col, fmt) in SHOWN.items() if col in self.columns}
        if "cost" in self.columns and "currency" in self.columns:
            out["cost"] = [f"{c:.3g} {u}" if c == c else ""
                           for c, u in zip(self["cost"], self["currency"], strict=True)]
        return pd.DataFrame(out)

    def _repr_html_(self) -> str:
        return self.readable().to_html(index=False, border=0)

    def __repr__(self) -> str:
        return self.readable().to_string(index=False) if len(self) else "no profiled cells yet"
