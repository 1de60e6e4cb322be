"""What each row says: the scale of a sparkline, the value texts and the label lines.

Pure functions of the sampler's latest readings, kept apart from the widgets.
"""

from __future__ import annotations

import math
import os
import socket
import time

import numpy as np

from ..metrics import HOST_KEY
from ..sources.base import Device
from ..units import gib
from . import text
from .columns import Column

CPUS = os.cpu_count()  # read once: the host row asks every refresh (None: not known)
CPU_SCALE_PCT = 100.0 * (CPUS or 1)  # the top of this kernel's CPU band: every core busy
_NO_ROW: dict = {}  # a GPU with no readings (yet)


def band_scale(metric: str, info: Device, row: dict, host: dict, v: np.ndarray) -> float:
    """The value at the top of a band: fixed for percentages, the card's limits otherwise.

    ``info`` is the device's description, ``row`` its latest readings, ``host`` the host's
    latest readings and ``v`` the values in the window, looked at only as the last resort
    for a scale (a card that reports no limit), since every trace asks each refresh.
    """
    fixed = fixed_scale(metric)
    if fixed is not None:
        return fixed
    limit = limit_scale(metric, info, row, host)
    if limit is not None:
        return limit
    return _peak(v, np.nan if metric == "power_w" else 1.0)


def limit_scale(metric: str, info: Device, row: dict, host: dict) -> float | None:
    """``band_scale`` of a metric with no fixed scale, where the limits say it (NaN where a
    limit is expected and unknown); None where only the window's peak can."""
    if metric == "mem_used_bytes":
        return _first(row.get("mem_total_bytes"), info.mem_total_bytes)
    if metric == "power_w":
        limit = _first(row.get("power_limit_w"), info.power_limit_w)
        return limit if limit == limit else None
    if metric in ("host_ram_used_bytes", "proc_rss_bytes"):
        return _first(host.get("host_ram_total_bytes"))
    return None


def fixed_scale(metric: str) -> float | None:
    """The top of a band that depends on the metric alone (percentages, temperature); else None.

    The panel asks it once per trace when it builds, and ``band_scale`` only for the others.
    """
    if metric.endswith("_pct"):
        return CPU_SCALE_PCT if metric == "proc_cpu_pct" else 100.0
    if metric == "temp_c":
        return 100.0
    return None


def _peak(v: np.ndarray, empty: float) -> float:
    """Largest value of ``v`` ignoring NaN; ``empty`` when it has none."""
    if not len(v):
        return empty
    peak = float(np.fmax.reduce(v))  # fmax skips NaN; all NaN gives NaN, with no warning
    return peak if peak == peak else np.nan


def metric_state(col: Column, row: dict, reported: object) -> str:
    """How the value of ``col`` stands for one GPU: "live", "stale", "failed" or "unsupported".

    From ``Sampler.latest()``'s ``states``: live if any of the column's metrics is live,
    else failed or stale if one is, else unsupported (also where the GPU never reported them).
    """
    states = row.get("states") or {}
    mine = [states.get(m) for m in col.metrics
            if (reported is None or m in reported) and m in states]
    if not mine:
        return "live" if reported is None or set(col.metrics) & set(reported) else "unsupported"
    for state in ("live", "failed", "stale"):
        if state in mine:
            return state
    return "unsupported"


def value_texts(col: Column, rows: list[Device], latest: dict, host: dict, running: bool,
                lost: dict) -> list[tuple[str, str, bool]]:
    """(text, tooltip, muted) of ``col`` for each panel row; muted when stale or lost.

    A value that is not live never shows as a number: "stale" or "failed" (the last good
    value in the tooltip), "n/a" where unsupported ("n/a (MIG)" for a MIG slice and for a
    card in MIG mode, whose whole-card reads such as utilisation NVML refuses too).
    """
    out = []
    stale = not running
    mig_cards = None
    metrics = col.metrics
    tip = col.help
    for dev in rows:
        reported = dev.metrics
        key = dev.key
        if key == HOST_KEY:
            out.append((text.host_value(col, host), text.host_tooltip(col), stale))
            continue
        row = latest.get(key, _NO_ROW)
        states = row.get("states") or _NO_ROW
        for m in metrics:  # the common case first: one of the column's metrics is live
            if states.get(m) == "live" and (reported is None or m in reported):
                state = "live"
                break
        else:
            state = metric_state(col, row, reported)
        if state == "unsupported":
            if mig_cards is None:
                mig_cards = {d.parent for d in rows if d.key != HOST_KEY and d.mig}
            if dev.mig:
                out.append(("n/a (MIG)", "not reported for MIG slices (NVML gives it for the "
                            "whole card only)", True))
            elif key in mig_cards:
                out.append(("n/a (MIG)", f"not reported while GPU {key} is in MIG mode", True))
            else:
                out.append(("n/a", f"GPU {key} does not report this", True))
            continue
        if state in ("stale", "failed"):
            good = {**row, **(row.get("last_good") or {})}
            last = text.gpu_value(col, good, dev)
            why = "its read failed" if state == "failed" else "not refreshed for several periods"
            out.append((state, f"{why}; last good value {last}", True))
            continue
        out.append((text.gpu_value(col, row, dev), tip, stale or key in lost))
    return out


def label_rows(rows: list[Device], latest: dict, host: dict, alerts: list, lost: dict) -> list[dict]:
    """Title, name, detail line (SM clock, or MIG, or lost time) with all of it and PCIe in
    its tooltip, LOST flag and alert badges."""
    out = []
    for dev in rows:
        key = dev.key
        if key == HOST_KEY:
            total = host.get("host_ram_total_bytes")
            detail = f"{CPUS or '?'} CPUs · {gib(total)} GiB RAM"
            out.append({"title": "host", "name": socket.gethostname(), "detail": detail,
                        "alerts": _badges([a for a in alerts if a.gpu is None])})
            continue
        row = latest.get(key, {})
        bits = []
        if dev.mig:
            bits.append(f"MIG slice of GPU {dev.parent}")
        clock = row.get("sm_clock_mhz")
        if text._ok(clock):
            bits.append(f"SM {clock:.0f} MHz")
        rx, tx = row.get("pcie_rx_bytes_per_s"), row.get("pcie_tx_bytes_per_s")
        tip = list(bits)
        if text._ok(rx) or text._ok(tx):
            tip.append(f"PCIe ↓{text.rate(rx)} ↑{text.rate(tx)}")
        if key in lost:
            bits = tip = [time.strftime("lost at %H:%M:%S", time.localtime(lost[key]))]
        name = dev.name.replace(" (simulated)", "")
        out.append({"title": f"GPU {key}", "name": name, "detail": bits[0] if bits else "",
                    "tip": " · ".join(tip).replace("SM ", "SM clock ", 1),
                    "lost": key in lost, "alerts": _badges([a for a in alerts if a.gpu == key])})
    return out


def _badges(alerts: list) -> list[tuple[str, str, str]]:
    """(severity, rule, tooltip) of each alert: the tooltip is its message and suggestion."""
    return [(a.severity, a.rule, f"{a.message} {a.suggestion}".strip()) for a in alerts]


def _first(*values: object) -> float:
    for v in values:
        if isinstance(v, (int, float)) and math.isfinite(v) and v > 0:
            return float(v)
    return np.nan
