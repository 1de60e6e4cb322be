"""The one table of GPU and host metrics: column name, unit, label and how to export it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Metric:
    """One measured quantity; ``name`` carries its unit (``power_w``, ``mem_used_bytes``)."""

    name: str
    unit: str
    label: str
    description: str
    dtype: type = np.float32
    percent: bool = False
    dcgm: str | None = None  # dcgm-exporter metric of the same quantity, if any
    dcgm_scale: float = 1.0  # multiply nbgpu's value by this to get dcgm's unit


GPU_METRICS: tuple[Metric, ...] = (
    Metric("util_pct", "%", "util", "time a kernel was running (NVML utilisation)",
           percent=True, dcgm="DCGM_FI_DEV_GPU_UTIL"),
    Metric("mem_util_pct", "%", "mem bw", "time device memory was read or written",
           percent=True, dcgm="DCGM_FI_DEV_MEM_COPY_UTIL"),
    Metric("mem_used_bytes", "B", "memory", "device memory in use", dtype=np.float64,
           dcgm="DCGM_FI_DEV_FB_USED", dcgm_scale=1 / 2**20),
    Metric("mem_total_bytes", "B", "memory total", "device memory size", dtype=np.float64),
    Metric("temp_c", "°C", "temp", "GPU core temperature", dcgm="DCGM_FI_DEV_GPU_TEMP"),
    Metric("power_w", "W", "power", "board power draw", dcgm="DCGM_FI_DEV_POWER_USAGE"),
    Metric("power_limit_w", "W", "power limit", "enforced power limit"),
    Metric("sm_clock_mhz", "MHz", "SM clock", "streaming multiprocessor clock",
           dcgm="DCGM_FI_DEV_SM_CLOCK"),
    Metric("mem_clock_mhz", "MHz", "mem clock", "memory clock", dcgm="DCGM_FI_DEV_MEM_CLOCK"),
    Metric("clock_event_reasons", "flags", "throttle", "NVML clock-event (throttle) reason bits",
           dtype=np.float64, dcgm="DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    Metric("energy_j", "J", "energy", "energy counter since the driver loaded", dtype=np.float64,
           dcgm="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", dcgm_scale=1000.0),
    Metric("pcie_rx_bytes_per_s", "B/s", "PCIe rx", "PCIe receive throughput", dtype=np.float64),
    Metric("pcie_tx_bytes_per_s", "B/s", "PCIe tx", "PCIe transmit throughput", dtype=np.float64),
    Metric("enc_util_pct", "%", "encoder", "video encoder utilisation", percent=True,
           dcgm="DCGM_FI_DEV_ENC_UTIL"),
    Metric("dec_util_pct", "%", "decoder", "video decoder utilisation", percent=True,
           dcgm="DCGM_FI_DEV_DEC_UTIL"),
    Metric("sm_active_pct", "%", "SM active", "SMs with work resident (GPM)", percent=True,
           dcgm="DCGM_FI_PROF_SM_ACTIVE", dcgm_scale=0.01),
    Metric("sm_occupancy_pct", "%", "SM occupancy", "resident warps of the maximum (GPM)",
           percent=True, dcgm="DCGM_FI_PROF_SM_OCCUPANCY", dcgm_scale=0.01),
    Metric("tensor_active_pct", "%", "tensor", "time tensor cores were busy (GPM)",
           percent=True, dcgm="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", dcgm_scale=0.01),
    Metric("dram_bw_pct", "%", "DRAM bw", "DRAM bandwidth of the maximum (GPM)", percent=True,
           dcgm="DCGM_FI_PROF_DRAM_ACTIVE", dcgm_scale=0.01),
)

HOST_METRICS: tuple[Metric, ...] = (
    Metric("host_cpu_pct", "%", "host CPU", "CPU of the whole machine", percent=True),
    Metric("host_ram_used_bytes", "B", "host RAM", "RAM in use on the machine", dtype=np.float64),
    Metric("host_ram_total_bytes", "B", "host RAM total", "RAM of the machine", dtype=np.float64),
    Metric("proc_cpu_pct", "%", "kernel CPU",
           "CPU of this process and its children, in % of one core"),
    Metric("proc_rss_bytes", "B", "kernel RAM", "resident memory of this process and its children",
           dtype=np.float64),
)

HOST_KEY = "host"  # the store's device key of the host rows
HOST_COLUMNS: dict[str, type] = {m.name: m.dtype for m in HOST_METRICS}

BY_NAME: dict[str, Metric] = {m.name: m for m in GPU_METRICS + HOST_METRICS}

def max_column(metric: str) -> str:
    """Name of the per-tick maximum column of a folded metric: ``power_w`` → ``power_max_w``."""
    base, _, unit = metric.rpartition("_")
    return f"{base}_max_{unit}"


# Beyond this magnitude (or negative, or a percentage over 100) a value is garbage, not a reading.
MAX_READING = 1e18


def plausible(metric: str, values: np.ndarray) -> np.ndarray:
    """True where ``values`` can be readings of ``metric`` (never negative, never past
    ``MAX_READING``; a percentage at most 100, a little over allowed for rounding)."""
    v = np.asarray(values, dtype=np.float64)
    m = BY_NAME.get(metric)
    top = 100.5 if m is not None and m.percent and m.name != "proc_cpu_pct" else MAX_READING
    with np.errstate(invalid="ignore"):
        return (v >= 0) & (v <= top)


# Bits of nvmlClocksEventReason* (values of the NVML API, stable across versions).
CLOCK_EVENT_REASONS: dict[int, str] = {1 << i: name for i, name in enumerate((
    "gpu_idle", "applications_clocks", "sw_power_cap", "hw_slowdown", "sync_boost", "sw_thermal",
    "hw_thermal", "hw_power_brake", "display_clock"))}
# Reasons that mean the card is being held back, not merely idle or pinned by a setting.
THROTTLE_BITS: int = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def reason_names(bits: float | int) -> list[str]:
    """Names of the clock-event reasons set in ``bits``; empty for NaN or 0."""
    if bits is None or bits != bits:
        return []
    value = int(bits)
    return [name for bit, name in CLOCK_EVENT_REASONS.items() if value & bit]
