"""What the live panel can show (a *column*: a sparkline and a value per row), the checks on its
settings, and the sampler it draws: the shared one, or host CPU and RAM alone when NVML is
missing (shared by the magics)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import session
from ..config import check_seconds
from ..errors import BadArgumentError, NVMLUnavailableError
from ..sources.base import HostOnlySource


@dataclass(frozen=True)
class Column:
    """One column: its GPU ``metrics`` (two may share a band), the ``host`` metric of the host
    row under it, if any; ``percent`` columns use a fixed 0–100 scale."""

    key: str
    title: str
    metrics: tuple[str, ...]
    colors: tuple[str, ...]
    host: str | None = None
    percent: bool = False
    help: str = ""


COLUMNS: dict[str, Column] = {c.key: c for c in (
    Column("util", "util", ("util_pct",), ("#22a559",), host="host_cpu_pct", percent=True,
           help="time a kernel was running; host row: CPU of the machine"),
    Column("mem", "memory · GiB", ("mem_used_bytes",), ("#3b82f6",), host="host_ram_used_bytes",
           help="device memory used of total, GiB (2^30 bytes, as nvidia-smi); host row: RAM of the "
           "machine"),
    Column("power", "power", ("power_w",), ("#e8890c",), host="proc_cpu_pct",
           help="board power against its limit; host row: CPU of this kernel, % of one core"),
    Column("temp", "temp", ("temp_c",), ("#e5484d",), host="proc_rss_bytes",
           help="GPU temperature, 0–100 °C; host row: RAM of this kernel"),
    Column("sm", "SM · tensor", ("sm_active_pct", "tensor_active_pct"), ("#8b5cf6", "#d9468f"),
           percent=True, help="SM activity and tensor-core activity, from NVML GPM (Hopper and newer)"),
    Column("membw", "mem bw", ("mem_util_pct",), ("#0ea5a4",), percent=True,
           help="time device memory was read or written"),
    Column("occupancy", "occupancy", ("sm_occupancy_pct",), ("#7c6fd6",), percent=True,
           help="resident warps of the maximum, from GPM"),
    Column("dram", "DRAM bw", ("dram_bw_pct",), ("#0891b2",), percent=True,
           help="DRAM bandwidth of the maximum, from GPM"),
    Column("clocks", "SM clock", ("sm_clock_mhz",), ("#a16207",),
           help="streaming multiprocessor clock"),
    Column("pcie", "PCIe", ("pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"), ("#2563eb", "#db2777"),
           help="PCIe receive and transmit throughput"),
    Column("codec", "enc · dec", ("enc_util_pct", "dec_util_pct"), ("#65a30d", "#c2410c"),
           percent=True, help="video encoder and decoder utilisation"),
)}
ALIASES = {"tensor": "sm", "memory": "mem", "temperature": "temp", "utilization": "util",
           "utilisation": "util", "clock": "clocks"}
DEFAULT_COLUMNS = ("util", "mem", "power", "temp")
OPTIONAL_DEFAULTS = ("sm",)  # added by default when some GPU reports them

DEFAULT_WINDOW_S = 60.0
DEFAULT_REFRESH_S = 2.0  # the shortest default refresh: numbers read at the pace of `watch` and nvitop
MIN_REFRESH_S = 0.25  # at most 4 updates a second per widget
WINDOW_CHOICES_S = (30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)


def check_metrics(metrics: object) -> tuple[str, ...] | None:
    """Column keys from "util,mem" or a list; None keeps the defaults. BadArgumentError if unknown."""
    if metrics is None:
        return None
    items = metrics.split(",") if isinstance(metrics, str) else metrics
    if not isinstance(items, Iterable):
        raise BadArgumentError(f"metrics must be a comma-separated list, got {metrics!r}")
    names = [str(item).strip() for item in items]
    keys = [ALIASES.get(name.lower(), name.lower()) for name in names]
    if bad := [name for name, key in zip(names, keys, strict=True) if key not in COLUMNS]:
        raise BadArgumentError(f"unknown metric {bad[0]!r}; choose from {', '.join(COLUMNS)}")
    if not keys:
        raise BadArgumentError(f"metrics is empty; choose from {', '.join(COLUMNS)}")
    return tuple(dict.fromkeys(keys))


def check_refresh(refresh_s: object) -> float:
    """Seconds between panel refreshes: 0.25 s (4 a second, the most) to 60 s."""
    return check_seconds(refresh_s, "refresh", MIN_REFRESH_S, 60.0)


def resolve_columns(chosen: tuple[str, ...] | None, reported: set[str]) -> list[Column]:
    """Columns to draw: the chosen ones, or the defaults plus those the cards report."""
    if chosen is not None:
        return [COLUMNS[k] for k in chosen]
    return [COLUMNS[k] for k in DEFAULT_COLUMNS + tuple(k for k in OPTIONAL_DEFAULTS
                                                        if reported & set(COLUMNS[k].metrics))]


def shared_or_host_only(source: object, interval: float | None):
    """The kernel's shared sampler; "auto" without NVML becomes a host-only sampler."""
    try:
        return session.ensure_sampler(source, interval)
    except NVMLUnavailableError as exc:
        if source not in (None, "auto"):
            raise
        return session.ensure_sampler(HostOnlySource(str(exc)), interval)


def plain_reason(reason: str) -> str:
    """The NVML error without its Python-API hint (the magics give their own hint)."""
    return reason.split("; or use source='sim'")[0].rstrip(".") + "."
