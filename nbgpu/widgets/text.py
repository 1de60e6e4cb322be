"""What each panel row says (its scales, values, labels) and their HTML; pure functions of the
sampler's latest readings, coloured with JupyterLab's CSS variables (light and dark themes)."""

from __future__ import annotations

import html
import math
import os
import socket
import time
from functools import lru_cache

import numpy as np

from ..metrics import HOST_KEY
from ..sources.base import Device
from ..units import MISSING, fmt_bytes, fmt_celsius, fmt_pct, fmt_rate, fmt_used_of, fmt_watts, gib
from .columns import Column

ROW_PX = 30
STRIP_PX = 12  # strip above the rows where mark labels go
TITLE_PX = 16  # a column's title line, above the strip
SPARK_PX = 76  # a column's sparklines
VALUE_PX = 72  # a column's values, right of its sparklines
GAP_PX = 4  # between columns
LABEL_PX = 150  # the rows' labels, left of the columns
COLUMN_PX = SPARK_PX + VALUE_PX + GAP_PX
CPUS = os.cpu_count()  # read once: the host row asks every refresh (None: not known)
CPU_SCALE_PCT = 100.0 * (CPUS or 1)  # the top of this kernel's CPU band: every core busy
MAX_ESCAPED = 4096
_NO_ROW: dict = {}  # a GPU with no readings (yet)
SEVERITY_COLORS = {"critical": "var(--jp-error-color1,#d32f2f)",
                   "warning": "var(--jp-warn-color1,#e08600)",
                   "info": "var(--jp-info-color1,#0288d1)"}
# The host row's values sit in the GPU columns: each says its own small label and tooltip.
HOST_LABELS = {"host_cpu_pct": ("host CPU", "CPU of the whole machine"),
               "host_ram_used_bytes": ("RAM", "RAM in use on the machine"),
               "proc_cpu_pct": ("kernel CPU", "CPU of this kernel and its child processes (% of one core)"),
               "proc_rss_bytes": ("kernel RSS", "RAM of this kernel and its child processes")}
# Sent once per panel; the HTML sent on every refresh only names these classes.
STYLE = f"""<style>
.nbgpu-p{{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
font-size:var(--jp-ui-font-size1,12px);color:var(--jp-ui-font-color1,#222);line-height:1.15}}
.nbgpu-r{{height:{ROW_PX}px;display:flex;flex-direction:column;justify-content:center;
overflow:hidden;white-space:nowrap}}
.nbgpu-r>div{{overflow:hidden;text-overflow:ellipsis}}
.nbgpu-m{{color:var(--jp-ui-font-color2,#777)}}
.nbgpu-n{{font-variant-numeric:tabular-nums}}
.nbgpu-v{{text-align:right;padding-right:4px;font-size:var(--jp-ui-font-size0,11px)}}
.nbgpu-d{{font-size:10px}}
.nbgpu-h{{display:block;font-size:9px;line-height:1;color:var(--jp-ui-font-color2,#777)}}
.nbgpu-b{{color:#fff;border-radius:3px;padding:0 4px;margin-left:4px;font-size:10px;font-weight:600}}
.nbgpu-t{{font-size:11px;white-space:nowrap;height:{TITLE_PX - 2}px;margin-bottom:2px;
overflow:hidden;text-overflow:ellipsis}}
.nbgpu-g{{display:flex}}
.nbgpu-l{{flex:0 0 auto;width:{LABEL_PX}px;box-sizing:border-box}}
.nbgpu-c{{flex:0 0 auto;width:{SPARK_PX + VALUE_PX}px;margin-right:{GAP_PX}px}}
.nbgpu-w{{margin-left:{SPARK_PX}px;width:{VALUE_PX}px;padding-top:{STRIP_PX}px}}
.nbgpu-spark{{pointer-events:none}}
.nbgpu-procs{{margin-top:4px;white-space:normal;font-size:11px;line-height:1.4}}
</style>"""

# A refresh escapes about a hundred texts, mostly the same ones (tooltips, "stale", titles).
_escape = lru_cache(maxsize=MAX_ESCAPED)(html.escape)


def _ok(v: object) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)  # (not units' ABC test: hot here)


def _first(*values: object) -> float:
    """The first positive finite number of ``values``; NaN where there is none."""
    return next((float(v) for v in values if _ok(v) and v > 0), np.nan)


def fixed_scale(metric: str) -> float | None:
    """The top of a band that depends on the metric alone (percentages, temperature); else None."""
    if metric.endswith("_pct"):
        return CPU_SCALE_PCT if metric == "proc_cpu_pct" else 100.0
    return 100.0 if metric == "temp_c" else None


def band_scale(metric: str, info: Device, row: dict, host: dict, v: np.ndarray) -> float:
    """The value at the top of a band: fixed, else the card's limits (``info``, its latest
    ``row``, the ``host``'s), else the peak of the window's values ``v``."""
    fixed = fixed_scale(metric)
    if fixed is not None:
        return fixed
    if metric == "mem_used_bytes":
        return _first(row.get("mem_total_bytes"), info.mem_total_bytes)
    if metric in ("host_ram_used_bytes", "proc_rss_bytes"):
        return _first(host.get("host_ram_total_bytes"))
    if metric == "power_w" and (limit := _first(row.get("power_limit_w"), info.power_limit_w)) == limit:
        return limit
    if not len(v):
        return np.nan if metric == "power_w" else 1.0
    return float(np.fmax.reduce(v))  # fmax skips NaN; all NaN gives NaN, with no warning


def gpu_value(col: Column, row: dict, info: Device) -> str:
    """Current value of ``col`` for a GPU from its latest readings (``Sampler.latest()`` row)."""
    vals = [row.get(m, math.nan) for m in col.metrics]
    if not any(_ok(v) for v in vals):
        return MISSING
    v0, k = vals[0], col.key
    if k == "mem":
        return fmt_used_of(v0, row.get("mem_total_bytes", info.mem_total_bytes))
    if k == "power":
        limit = row.get("power_limit_w", info.power_limit_w)
        return f"{v0:.0f}/{limit:.0f} W" if _ok(limit) and _ok(v0) else fmt_watts(v0)
    if k == "temp":
        return fmt_celsius(v0)
    if k == "clocks":
        return f"{v0:.0f} MHz"
    if k == "pcie":
        return f"↓{fmt_rate(v0)} ↑{fmt_rate(vals[1])}"
    if col.percent and len(vals) == 2:
        return " · ".join(f"{v:.0f}" if _ok(v) else MISSING for v in vals) + " %"
    return fmt_pct(v0)


def host_value(col: Column, host: dict) -> str:
    """The host row's value under ``col``, its label on a line before ("" with no host metric)."""
    if col.host is None:
        return ""
    v = host.get(col.host, math.nan)
    if col.host == "host_ram_used_bytes":
        value = fmt_used_of(v, host.get("host_ram_total_bytes"))
    else:
        value = fmt_bytes(v) if col.host == "proc_rss_bytes" else fmt_pct(v)
    return f"{HOST_LABELS[col.host][0]}\n{value}"


def value_texts(col: Column, rows: list[Device], latest: dict, host: dict, running: bool,
                lost: dict) -> list[tuple[str, str, bool]]:
    """(text, tooltip, muted) of ``col`` for each panel row. A value not live shows "stale" or
    "failed" (the last good one in the tooltip), or "n/a" ("n/a (MIG)" for MIG slices and cards)."""
    out = []
    stale = not running
    mig_cards = {d.parent for d in rows if d.mig}
    for dev in rows:
        key, reported = dev.key, dev.metrics
        if key == HOST_KEY:
            out.append((host_value(col, host), HOST_LABELS.get(col.host or "", ("", ""))[1], stale))
            continue
        row = latest.get(key, _NO_ROW)
        states = row.get("states") or _NO_ROW
        # Live if any of the column's metrics is, else failed or stale if one is; live too while
        # none has a state yet, unsupported where the card reports none of them.
        mine = [states.get(m) for m in col.metrics if reported is None or m in reported]
        state = next((s for s in ("live", "failed", "stale") if s in mine),
                     "live" if mine and not any(mine) else "unsupported")
        if state == "live":
            out.append((gpu_value(col, row, dev), col.help, stale or key in lost))
        elif state != "unsupported":
            last = gpu_value(col, {**row, **(row.get("last_good") or {})}, dev)
            why = "its read failed" if state == "failed" else "not refreshed for several periods"
            out.append((state, f"{why}; last good value {last}", True))
        elif dev.mig:
            out.append(("n/a (MIG)", "not reported for MIG slices (NVML gives it for the whole card only)",
                        True))
        elif key in mig_cards:
            out.append(("n/a (MIG)", f"not reported while GPU {key} is in MIG mode", True))
        else:
            out.append(("n/a", f"GPU {key} does not report this", True))
    return out


def values_html(texts: list[tuple[str, str, bool]], tip: str = "") -> str:
    """One column of values, a row each (text, tooltip, muted); a row whose tooltip is the
    column's ``tip`` carries none of its own (the browser shows the column's)."""
    rows = "".join([_value_row(item) if item[1] != tip else _value_row((item[0], "", item[2]))
                    for item in texts])
    said = f' title="{_escape(tip)}"' if tip else ""
    return f'<div class="nbgpu-p nbgpu-w"{said}>{rows}</div>'


def grid_html(labels: str, titles: list[str], values: list[list[tuple[str, str, bool]]],
              below: str = "", tips: list[str] | None = None) -> str:
    """The layer over the panel's figure: the rows' labels, then every column's title over its
    values (in the gap right of its lines); ``below`` (the processes line) under the rows."""
    tips = tips if tips is not None else [""] * len(titles)
    cols = "".join([f'<div class="nbgpu-c">{title}{values_html(texts, tip)}</div>'
                    for title, texts, tip in zip(titles, values, tips, strict=True)])
    return f'<div class="nbgpu-g">{labels}{cols}</div>{below}'


@lru_cache(maxsize=MAX_ESCAPED)
def _value_row(item: tuple[str, str, bool]) -> str:
    """The HTML of one value row (text, tooltip, muted); a line before a newline is its label."""
    text, tip, muted = item
    said = f' title="{_escape(tip)}"' if tip else ""
    label, _, value = text.rpartition("\n")
    shown = (f'<span class="nbgpu-h">{_escape(label)}</span>' if label else "") + _escape(value)
    return f'<div class="nbgpu-r nbgpu-n nbgpu-v{" nbgpu-m" if muted else ""}"{said}>{shown}</div>'


def badge(text: str, background: str, tip: str = "") -> str:
    return (f'<span class="nbgpu-b" style="background:{background}" title="{_escape(tip)}">'
            f'{_escape(text)}</span>')


def label_html(rows: list[Device], latest: dict, host: dict, alerts: list, lost: dict, span: str = "",
               span_tip: str = "") -> str:
    """The left column: ``span`` on the title line, then per row its title, name, LOST and alert
    badges, and a muted detail line (SM clock, MIG or lost time) whose tooltip adds PCIe."""
    out = []
    for dev in rows:
        key = dev.key
        badges = badge("LOST", SEVERITY_COLORS["critical"], "this GPU stopped answering (fell off "
                       "the bus or was reset)") if key in lost else ""
        for a in alerts:
            if a.gpu == (None if key == HOST_KEY else key):
                badges += badge("⚠ " + a.rule, SEVERITY_COLORS.get(a.severity, SEVERITY_COLORS["info"]),
                                f"{a.message} {a.suggestion}".strip())
        row = latest.get(key, _NO_ROW)
        bits = [f"MIG slice of GPU {dev.parent}"] if dev.mig else []
        if _ok(clock := row.get("sm_clock_mhz")):
            bits.append(f"SM {clock:.0f} MHz")
        rx, tx = row.get("pcie_rx_bytes_per_s"), row.get("pcie_tx_bytes_per_s")
        tip = bits + ([f"PCIe ↓{fmt_rate(rx)} ↑{fmt_rate(tx)}"] if _ok(rx) or _ok(tx) else [])
        if key in lost:
            bits = tip = [time.strftime("lost at %H:%M:%S", time.localtime(lost[key]))]
        title, name = f"GPU {key}", _escape(dev.name.replace(" (simulated)", ""))
        if key == HOST_KEY:
            title, name, tip = "host", _escape(socket.gethostname()), []
            bits = [f"{CPUS or '?'} CPUs · {gib(host.get('host_ram_total_bytes'))} GiB RAM"]
        said = f' title="{_escape(" · ".join(tip).replace("SM ", "SM clock ", 1))}"' if tip else ""
        out.append(f'<div class="nbgpu-r"><div><b>{_escape(title)}</b> <span title="{name}">{name}</span>'
                   f'{badges}</div><div class="nbgpu-m nbgpu-n nbgpu-d"{said}>'
                   f'{_escape(bits[0]) if bits else "&nbsp;"}</div></div>')
    said = f' title="{_escape(span_tip)}"' if span_tip else ""
    return (f'<div class="nbgpu-p nbgpu-l" style="padding:0 8px 0 0">'
            f'<div class="nbgpu-m nbgpu-t nbgpu-span"{said}>{_escape(span) or "&nbsp;"}</div>'
            f'<div style="height:{STRIP_PX}px"></div>{"".join(out)}</div>')


def header_html(describe: str, simulated: bool, state: str, state_color: str, note: str = "") -> str:
    """The top line: what is monitored, a SIMULATED badge, the state, and any warning."""
    sim = badge("SIMULATED", "var(--jp-warn-color0,#c45500)",
                "these GPUs are simulated: the numbers are made up, for demos and tests") + " " \
        if simulated else ""
    note_html = (f'<div class="nbgpu-m" style="font-size:11px;white-space:normal">{_escape(note)}</div>'
                 if note else "")
    return (f'<div class="nbgpu-p" style="line-height:1.4"><b>nbgpu</b> '
            f'<span class="nbgpu-m">{_escape(describe)}</span> {sim}'
            f'<span style="color:{state_color};font-weight:600;margin-left:8px">{_escape(state)}</span>'
            f'{note_html}</div>')


def snapshot_html(cols: list[Column], rows: list[Device], values: list[list[tuple[str, str, bool]]]
                  ) -> str:
    """The last values of a stopped panel as one static table (the live widgets are closed)."""
    if not values or not rows:
        return ""
    head = "".join(f"<th>{_escape(c.title)}</th>" for c in cols)
    body = "".join(f"<tr><td><b>{'host' if dev.key == HOST_KEY else f'GPU {_escape(str(dev.key))}'}</b></td>"
                   + "".join(f"<td>{_escape(col[i][0])}</td>" for col in values if i < len(col)) + "</tr>"
                   for i, dev in enumerate(rows))
    return (f'<div class="nbgpu-p nbgpu-m" style="font-size:11px"><table class="nbgpu-n" '
            f'style="border-collapse:collapse"><tr><th>last values</th>{head}</tr>{body}</table></div>')

