"""How a profile is shown: the one-line summary, the HTML table and the cell report.

The cell report is an interactive chart (bqplot) whose display data also carries a static
SVG picture and an HTML table, so a notebook saved without widget state still shows the
profile on GitHub, nbviewer and in ``jupyter nbconvert --to html``.
"""

from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING

from ..svg import DEFAULT_METRICS, svg_series
from .summary import selected

if TYPE_CHECKING:

    from .capture import Capture

WIDGET_MAX_POINTS = 20_000  # per line; longer series are min/max-decimated (peaks kept)
REPORT_METRICS = ("util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_active_pct",
                  "tensor_active_pct", "mem_util_pct", "sm_clock_mhz", "pcie_rx_bytes_per_s",
                  "pcie_tx_bytes_per_s")


def fmt_duration(s: float) -> str:
    """``1m12s``, ``2.04s``, ``1h03m``."""
    if s is None or not math.isfinite(s):
        return "–"
    if s < 60:
        return f"{s:.2f}s" if s < 10 else f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def fmt_bytes(b: float, signed: bool = False) -> str:
    """Bytes as GB/MB text (decimal units, as nvidia-smi's GB)."""
    if b is None or not math.isfinite(b):
        return "–"
    sign = "+" if signed and b >= 0 else ""
    for div, unit in ((1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if abs(b) >= div:
            return f"{sign}{b / div:.1f} {unit}"
    return f"{sign}{b:.0f} B"


def fmt_energy(j: float) -> str:
    if j is None or not math.isfinite(j):
        return "–"
    if j >= 1e6:
        return f"{j / 1e6:.2f} MJ"
    if j >= 1e3:
        return f"{j / 1e3:.1f} kJ"
    return f"{j:.0f} J"


def _num(v: float, unit: str, digits: int = 0) -> str:
    return "–" if v is None or not math.isfinite(v) else f"{v:.{digits}f}{unit}"


def _records(summary) -> list[dict]:
    """Summary rows from a DataFrame or a list of dicts."""
    if summary is None:
        return []
    return summary.to_dict("records") if hasattr(summary, "to_dict") else list(summary)


def _isnum(v) -> bool:
    return v is not None and not isinstance(v, str) and v == v


def one_line(summary, status: str = "ok") -> str:
    """``GPU0 1m12s · util 87% · peak 41.2 GB (+3.1) · 612 W · 44.1 kJ`` for each GPU.

    ``summary`` is a summary DataFrame or its rows; more than two GPUs are folded into
    one line over all of them.
    """
    rows = _records(summary)
    rows = [r for r in rows if not (isinstance(r["gpu"], str) and "/" in r["gpu"])] or rows
    if not rows:
        return "no GPU readings"
    tail = "" if status == "ok" else f" · {status.upper()}"
    if len(rows) > 2:
        from .summary import combine

        rows = [dict(combine(rows), gpu=f"{len(rows)} GPUs ")]
    parts = []
    for r in rows:
        delta = r["mem_delta_bytes"]
        sign = "+" if _isnum(delta) and delta >= 0 else "-"
        delta_txt = f" ({sign}{abs(delta) / 1e9:.1f})" if _isnum(delta) else ""
        gpu = r["gpu"]
        name = gpu if isinstance(gpu, str) and gpu.endswith(" ") else f"GPU{gpu} "
        bits = [f"{name}{fmt_duration(r['duration_s'])}",
                f"util {_num(r['util_mean_pct'], '%')}",
                f"peak {fmt_bytes(r['mem_peak_bytes'])}{delta_txt}",
                _num(r["power_mean_w"], " W"),
                fmt_energy(r["energy_j"])]
        if isinstance(r.get("throttle_reasons"), str) and r["throttle_reasons"]:
            bits.append("throttled")
        parts.append(" · ".join(bits))
    return " | ".join(parts) + tail


def summary_html(summary) -> str:
    """The per-GPU summary (DataFrame or rows) as a small HTML table; no kernel or JavaScript needed."""
    rows = _records(summary)
    if not rows:
        return "<p>No GPU readings in this block.</p>"
    has_sm = any(_isnum(r.get("sm_active_mean_pct")) for r in rows)
    has_torch = any("torch_peak_allocated_bytes" in r for r in rows)
    head = ["GPU", "duration", "memory start → end", "peak", "Δ", "util mean / max"]
    head += ["SM active"] if has_sm else []
    head += ["power mean / max", "energy", "temp max", "throttling"]
    head += ["torch peak alloc / reserved"] if has_torch else []
    head += ["status"]
    out = ['<table class="nbgpu-summary" style="border-collapse:collapse;font-size:12px">',
           "<thead><tr>" + "".join(f'<th style="text-align:left;padding:2px 8px">{escape(h)}</th>'
                                   for h in head) + "</tr></thead><tbody>"]
    for r in rows:
        cells = [f"{r['gpu']} {escape(str(r['name']))}", fmt_duration(r["duration_s"]),
                 f"{fmt_bytes(r['mem_start_bytes'])} → {fmt_bytes(r['mem_end_bytes'])}",
                 fmt_bytes(r["mem_peak_bytes"]), fmt_bytes(r["mem_delta_bytes"], signed=True),
                 f"{_num(r['util_mean_pct'], '%')} / {_num(r['util_max_pct'], '%')}"]
        if has_sm:
            cells.append(_num(r["sm_active_mean_pct"], "%"))
        cells += [f"{_num(r['power_mean_w'], ' W')} / {_num(r['power_max_w'], ' W')}",
                  f"{fmt_energy(r['energy_j'])} ({r['energy_source']})",
                  _num(r["temp_max_c"], " °C"),
                  escape(r["throttle_reasons"]) if r["throttle_reasons"] else "none"]
        if has_torch:
            cells.append(f"{fmt_bytes(r.get('torch_peak_allocated_bytes'))} / "
                         f"{fmt_bytes(r.get('torch_reserved_end_bytes'))}")
        cells.append(escape(str(r["status"])))
        out.append("<tr>" + "".join(f'<td style="padding:2px 8px">{c}</td>' for c in cells) + "</tr>")
    out.append("</tbody></table>")
    notes = sorted({r["resolution_note"] for r in rows if isinstance(r.get("resolution_note"), str)
                    and r["resolution_note"]})
    alerts = sorted({r["alerts"] for r in rows if isinstance(r.get("alerts"), str) and r["alerts"]})
    for a in alerts:
        out.append(f'<p style="margin:2px 0;color:#a33">⚠ {escape(a)}</p>')
    for n in notes:
        out.append(f'<p style="margin:2px 0;color:#666">{escape(n)}</p>')
    return "".join(out)


def _title(cap: Capture) -> str:
    label = f"{cap.label} · " if cap.label else ""
    status = "" if cap.status == "ok" else f" · {cap.status}"
    src = " · simulated GPUs" if cap.sampler is not None and cap.sampler.simulated else ""
    return f"GPU profile · {label}{fmt_duration(cap.duration_s)}{status}{src}"


def _gpus(cap: Capture) -> list:
    keys = [d["index"] for d in cap.sampler.devices] if cap.sampler is not None else []
    return [g for g in keys if selected(g, cap.gpus)]


def static_svg(cap: Capture, width: int = 720) -> str:
    """The capture's timeline as SVG, read straight from the store (no DataFrame)."""
    window, gpus = cap.window, _gpus(cap)
    data = {m: {g: window.series(g, m) for g in gpus} for m in DEFAULT_METRICS}
    return svg_series(data, cap.marks, width, gpus)


def static_html(cap: Capture, svg: str | None = None) -> str:
    """Title, SVG picture and summary table of a capture, as one self-contained HTML block."""
    svg = static_svg(cap) if svg is None else svg
    error = f'<p style="margin:2px 0;color:#a33">{escape(cap.error)}</p>' if cap.error else ""
    return (f'<div class="nbgpu-report"><b>{escape(_title(cap))}</b>{error}'
            f"<div>{svg}</div>{summary_html(cap.summary_rows)}</div>")


def compact_html(cap: Capture, svg: str | None = None) -> str:
    """The one-line summary; a click opens the picture and table (no kernel needed)."""
    svg = static_svg(cap) if svg is None else svg
    return (f'<details class="nbgpu-cell"><summary style="cursor:pointer;font-size:12px;color:#444">'
            f"{escape(cap.one_line())}</summary><div>{svg}</div>{summary_html(cap.summary_rows)}</details>")
