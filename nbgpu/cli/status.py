"""Text for people: the live one-line status per GPU, in the units every view uses."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..units import fmt_celsius, fmt_pct, fmt_used_of, fmt_watts

if TYPE_CHECKING:
    import pandas as pd

    from ..sampler import Sampler


def status_lines(sampler: Sampler) -> list[str]:
    """One line per GPU with its newest util, memory (GiB), power and temperature."""
    lines = []
    for row in sampler.latest():
        mem = f"{fmt_used_of(row.get('mem_used_bytes'), row.get('mem_total_bytes'))} GiB"
        power = f"{fmt_watts(row.get('power_w'))}/{fmt_watts(row.get('power_limit_w'))}"
        state = ("  LOST" if row["state"] == "lost" else "") + ("  SIMULATED" if sampler.simulated else "")
        lines.append(f"GPU {row['gpu']:<4} util {fmt_pct(row.get('util_pct')):>4}  mem {mem:<16}"
                     f" power {power:<12} {fmt_celsius(row.get('temp_c'))}{state}")
    return lines


def epoch_seconds(times: pd.Series) -> np.ndarray:
    """Seconds since the epoch of a UTC datetime column, whatever its precision."""
    import pandas as pd

    return (times - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()
