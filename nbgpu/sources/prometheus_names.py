"""Prometheus names of nbgpu's metrics both ways: ``FAMILIES`` (what the exporter serves:
dcgm-exporter's names, else ``nbgpu_gpu_*``) and ``BY_SERIES`` (what the source reads back)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..metrics import GPU_METRICS, Metric

MIB = 2.0**20
INFO_SERIES = "nbgpu_gpu_info"

# nbgpu's name suffix -> Prometheus base-unit suffix, for metrics dcgm-exporter lacks.
_SUFFIXES = {"_bytes_per_s": "_bytes_per_second", "_bytes": "_bytes", "_pct": "_percent", "_w": "_watts",
             "_c": "_celsius", "_mhz": "_megahertz", "_j": "_joules"}


@dataclass(frozen=True)
class Family:
    """How one nbgpu metric appears in Prometheus: series name, scale, help text."""

    metric: str
    name: str
    scale: float  # multiply nbgpu's value by this to get the series' value
    help: str


def family_of(m: Metric) -> Family:
    """The series one metric is exported as (dcgm-exporter's name where it has one)."""
    if m.dcgm:
        unit = {0.01: "ratio", 1000.0: "mJ"}.get(m.dcgm_scale, {"B": "MiB"}.get(m.unit, m.unit))
        return Family(m.name, m.dcgm, m.dcgm_scale, f"{m.description} (in {unit}).")
    for suffix, prom in _SUFFIXES.items():
        if m.name.endswith(suffix):
            return Family(m.name, "nbgpu_gpu_" + m.name[: -len(suffix)] + prom, 1.0,
                          f"{m.description} (in {m.unit}).")
    return Family(m.name, "nbgpu_gpu_" + m.name, 1.0, f"{m.description} ({m.unit}).")


FAMILIES: tuple[Family, ...] = tuple(family_of(m) for m in GPU_METRICS)

# nbgpu metric -> [(series name, multiply the series value by this)], best first.
SERIES: dict[str, list[tuple[str, float]]] = {}
for _fam in FAMILIES:
    SERIES.setdefault(_fam.metric, []).append((_fam.name, 1.0 / _fam.scale))
_OLDER: dict[str, list[tuple[str, float]]] = {
    "util_pct": [("dcgm_gpu_utilization", 1.0)],
    "mem_util_pct": [("dcgm_mem_copy_utilization", 1.0)],
    "mem_used_bytes": [("dcgm_fb_used", MIB)],
    "mem_total_bytes": [("DCGM_FI_DEV_FB_TOTAL", MIB)],
    "temp_c": [("dcgm_gpu_temp", 1.0)],
    "power_w": [("DCGM_FI_DEV_POWER_USAGE_INSTANT", 1.0), ("dcgm_power_usage", 1.0)],
    "power_limit_w": [("DCGM_FI_DEV_POWER_MGMT_LIMIT", 1.0), ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 1.0)],
    "sm_clock_mhz": [("dcgm_sm_clock", 1.0)],
    "mem_clock_mhz": [("dcgm_memory_clock", 1.0)],
    "clock_event_reasons": [("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", 1.0)],
    "energy_j": [("dcgm_total_energy_consumption", 1e-3)],
    "enc_util_pct": [("dcgm_enc_utilization", 1.0)],
    "dec_util_pct": [("dcgm_dec_utilization", 1.0)],
}
for _metric, _names in _OLDER.items():
    SERIES.setdefault(_metric, []).extend(_names)

# Series combined into a metric afterwards: free framebuffer gives the total with "used".
FB_FREE = {"DCGM_FI_DEV_FB_FREE": MIB, "dcgm_fb_free": MIB}

# series name -> (nbgpu metric, factor, priority: lower wins when two series say the same)
BY_SERIES: dict[str, tuple[str, float, int]] = {
    name: (metric, factor, rank) for metric, names in SERIES.items()
    for rank, (name, factor) in enumerate(names)
}


def selector() -> str:
    """A PromQL series selector matching every series this module understands."""
    names = sorted(set(BY_SERIES) | set(FB_FREE) | {INFO_SERIES})
    return '{__name__=~"' + "|".join(names) + '"}'


def is_blank(value: float) -> bool:
    """Whether ``value`` is NaN, infinite or one of DCGM's blank sentinels (int32, int64, fp64)."""
    return (not math.isfinite(value) or 2147483632.0 <= value <= 2147483647.0
            or value >= 9223372036854775792.0 or 140737488355328.0 <= value <= 140737488355343.0)
