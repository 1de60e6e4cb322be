"""How a profile is shown: the one-line summary, the HTML table and the cell report."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from ..diagnostics.engine import JUDGE_MIN_S
from ..diagnostics.stacks import COLORS, LABELS
from ..svg import DEFAULT_METRICS, svg_series
from ..units import finite, fmt_bytes, fmt_celsius, fmt_duration, fmt_energy, fmt_pct, fmt_watts
from .summary import Summary, texts

if TYPE_CHECKING:

    from .capture import Capture

WIDGET_MAX_POINTS = 20_000  # per line; longer series are min/max-decimated (peaks kept)
REPORT_METRICS = ("util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_active_pct",
                  "tensor_active_pct", "mem_util_pct", "sm_clock_mhz", "pcie_rx_bytes_per_s",
                  "pcie_tx_bytes_per_s")


def one_line(summary: Summary, status: str = "ok") -> str:
    """``GPU0 1m12s · util 87 % · peak 38.4 GiB (+2.9 GiB) · 612 W · 44.1 kJ`` for each GPU."""
    cards = {r["gpu"] for r in summary.rows}
    rows = [r for r in summary.rows if r.get("parent") not in cards]  # a listed card's slices left out
    if not rows:
        return "no GPU readings"
    named = [(f"GPU{r['gpu']}", r) for r in rows]
    if len(rows) > 2 and summary.combined:
        named = [(f"{len(rows)} GPUs", summary.combined)]
    parts = []
    for name, r in named:
        delta = f" ({fmt_bytes(r['mem_delta_bytes'], signed=True)})" if finite(r["mem_delta_bytes"]) else ""
        throttled = isinstance(r.get("throttle_reasons"), str) and r["throttle_reasons"]
        bits = [f"{name} {fmt_duration(r['duration_s'])}", f"util {fmt_pct(r['util_mean_pct'])}",
                f"peak {fmt_bytes(r['mem_peak_bytes'])}{delta}", fmt_watts(r["power_mean_w"]),
                fmt_energy(r["energy_j"]), *(["throttled"] if throttled else [])]
        parts.append(" · ".join(bits))
    return " | ".join(parts) + ("" if status == "ok" else f" · {status.upper()}")


_COLUMNS = {  # heading: the cell of a row (already HTML)
    "GPU": lambda r: escape(f"{r['gpu']} {r['name']}"),
    "duration": lambda r: fmt_duration(r["duration_s"]),
    "memory start → end": lambda r: f"{fmt_bytes(r['mem_start_bytes'])} → {fmt_bytes(r['mem_end_bytes'])}",
    "peak": lambda r: fmt_bytes(r["mem_peak_bytes"]) + (  # and its source where PyTorch's allocator took part
        f" ({r['mem_peak_source']})" if r.get("mem_peak_source") in ("allocator", "both") else ""),
    "Δ memory": lambda r: fmt_bytes(r["mem_delta_bytes"], signed=True),
    "util mean / max": lambda r: f"{fmt_pct(r['util_mean_pct'])} / {fmt_pct(r['util_max_pct'])}",
    "SM active": lambda r: fmt_pct(r["sm_active_mean_pct"]),
    "power mean / max": lambda r: f"{fmt_watts(r['power_mean_w'])} / {fmt_watts(r['power_max_w'])}",
    "energy": lambda r: f"{fmt_energy(r['energy_j'])} ({r['energy_source']})",
    "temp max": lambda r: fmt_celsius(r["temp_max_c"]),
    "throttling": lambda r: escape(r["throttle_reasons"]) if r.get("throttle_reasons") else "none",
    "torch peak alloc / reserved": lambda r: f"{fmt_bytes(r.get('torch_peak_allocated_bytes'))} / "
                                             f"{fmt_bytes(r.get('torch_peak_reserved_bytes'))}",
    "status": lambda r: escape(str(r["status"])),
}


def summary_html(rows: list[dict], combined: dict | None = None) -> str:
    """The per-GPU summary rows as a small HTML table, with a row for all GPUs (``combined``) when
    there are several; cells never wrap. No kernel or JavaScript needed."""
    if not rows:
        return "<p>No GPU readings in this block.</p>"
    has_sm = any(finite(r.get("sm_active_mean_pct")) for r in rows)
    has_torch = any("torch_peak_allocated_bytes" in r for r in rows)
    heads = [h for h in _COLUMNS if (has_sm or h != "SM active") and (has_torch or not h.startswith("torch"))]
    th = '<th style="text-align:left;padding:2px 8px;white-space:nowrap">'
    out = ['<div style="overflow-x:auto">'
           '<table class="nbgpu-summary" style="border-collapse:collapse;font-size:12px">',
           "<thead><tr>" + "".join(f"{th}{escape(h)}</th>" for h in heads) + "</tr></thead><tbody>"]
    total = [dict(combined, gpu="all", name="GPUs", alerts="")] if combined and len(rows) > 1 else []
    for r in rows + total:
        bold = "font-weight:bold;border-top:1px solid #ccc;" if r in total else ""
        td = f'<td style="{bold}padding:2px 8px;white-space:nowrap">'
        out.append("<tr>" + "".join(f"{td}{_COLUMNS[h](r)}</td>" for h in heads) + "</tr>")
    out.append("</tbody></table></div>")
    out += [f'<p style="margin:2px 0;color:#a33">⚠ {escape(a)}</p>' for a in texts(rows, "alerts")]
    out += [f'<p style="margin:2px 0;color:#666">{escape(n)}</p>' for n in texts(rows, "resolution_note")]
    return "".join(out)


def _title(cap: Capture) -> str:
    status = "" if cap.status == "ok" else f" · {cap.status}"
    src = " · SIMULATED GPUs" if cap.sampler is not None and cap.sampler.simulated else ""
    return f"GPU profile · {fmt_duration(cap.duration_s)}{status}{src}"


NO_GPU_LINE = ("No GPU is visible here, so this block has no GPU profile; to try nbgpu on simulated "
               'GPUs, use %%gpumon --source sim or nbgpu.capture(source="sim").')


def no_gpu(cap: Capture) -> bool:
    """True when the capture's sampler sees no GPU at all (e.g. a host-only sampler without NVML)."""
    return cap.sampler is not None and not list(cap.sampler.devices)


def static_svg(cap: Capture) -> str:
    """The capture's timeline as SVG, read straight from the store (no DataFrame)."""
    gpus, read = cap.gpu_keys(), cap.series(DEFAULT_METRICS)
    data = {m: {g: read[g][m] for g in gpus} for m in DEFAULT_METRICS}
    return svg_series(data, cap.marks, 720, gpus)


def where_line(cap: Capture) -> str:
    """``main thread: data loader 81 %, ... · line 7 `for x, y in dl`: 81 %``; "" without samples."""
    split = cap.split()
    if split is None:
        return ""
    shares = sorted(split.shares.items(), key=lambda kv: -kv[1])
    text = "main thread: " + ", ".join(f"{LABELS[c]} {100 * s:.0f} %" for c, s in shares if s >= 0.005)
    top = split.top_line
    if top is not None:
        text += f" · line {top['line']} `{top['text']}`: {100 * top['share']:.0f} %"
    return text


def judged_line(cap: Capture) -> str:
    """``too short to judge: idle, input_bound (it ran 0.50 s; ...)``; "" if every rule judged it."""
    _ = cap.alerts  # judging the block names the rules it was too short for
    if not cap.too_short:
        return ""
    return (f"too short to judge: {', '.join(cap.too_short)} (it ran {cap.duration_s:.2f} s; these rules "
            f"need at least {JUDGE_MIN_S:g} s and three utilisation readings)")


def where_html(cap: Capture) -> str:
    """The split as one small bar and its line (HTML); "" without stack samples."""
    text, judged = where_line(cap), judged_line(cap)
    out = "" if not judged else f'<p style="margin:2px 0;font-size:12px;color:#666">{escape(judged)}</p>'
    if not text:
        return out
    bar = "".join(f'<span title="{LABELS[c]} {100 * s:.0f} %" style="display:inline-block;height:10px;'
                  f'width:{max(1, round(240 * s))}px;background:{COLORS[c]}"></span>'
                  for c, s in cap.split().shares.items() if s >= 0.005)
    return (f'<p class="nbgpu-where" style="margin:2px 0;font-size:12px"><span style="display:inline-block;'
            f'vertical-align:middle">{bar}</span> {escape(text)}</p>{out}')


def _body(cap: Capture, svg: str | None) -> str:
    """The picture (``svg`` if given), where the main thread was, and the summary table."""
    svg = static_svg(cap) if svg is None else svg
    return f"<div>{svg}</div>{where_html(cap)}{summary_html(cap.summary_rows, cap.totals)}"


def static_html(cap: Capture, svg: str | None = None) -> str:
    """Title, SVG picture and summary table of a capture, as one self-contained HTML block."""
    error = f'<p style="margin:2px 0;color:#a33">{escape(cap.error)}</p>' if cap.error else ""
    body = f"<p>{escape(NO_GPU_LINE)}</p>" if no_gpu(cap) else _body(cap, svg)  # no GPU: no empty chart
    return f'<div class="nbgpu-report"><b>{escape(_title(cap))}</b>{error}{body}</div>'


def compact_html(cap: Capture) -> str:
    """The one-line summary; a click opens the picture and table (no kernel needed)."""
    if no_gpu(cap):
        return f'<p class="nbgpu-cell" style="font-size:12px;color:#444">{escape(NO_GPU_LINE)}</p>'
    return (f'<details class="nbgpu-cell"><summary style="cursor:pointer;font-size:12px;color:#444">'
            f"{escape(cap.one_line())}</summary>{_body(cap, None)}</details>")
