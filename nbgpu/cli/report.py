"""``nbgpu report``: one self-contained HTML file from a recorded run (inline SVG and styles, no
script); a torn last line is skipped and counted; a file that is not a run is one line, exit 2."""

from __future__ import annotations

import datetime as _dt
import html
import os
import sys

from ..errors import FileError
from ..files import atomic_file
from ..profiles.summary import Summary, summarize
from ..runfile import Run, load_run
from ..timeline import epoch_seconds
from ..units import fmt_bytes, fmt_celsius, fmt_duration, fmt_energy, fmt_pct, fmt_watts
from .options import refuse_overwrite, shown

PLOT_METRICS = ("util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_active_pct", "sm_clock_mhz",
                "proc_cpu_pct")


def _when(t: float) -> str:
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


SIMULATED_NOTE = "SIMULATED GPUs: these numbers are made up for demos and tests"


def html_table(head: list[str], rows: list[list[str]], empty: str = "") -> str:
    """An HTML table of already-escaped cells under escaped headers; ``empty`` said without rows."""
    if empty and not rows:
        return f"<p>{empty}</p>"
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def render_html(run: Run, title: str | None = None) -> str:
    """The report of ``run`` as one HTML document (no scripts, no external resources)."""
    from ..svg import svg_timeline

    df, head = run.frame, run.header
    names = {str(d.get("index")): d.get("name", "") for d in run.devices()}
    esc = html.escape
    title = title or f"nbgpu run: {os.path.basename(run.path)}"
    parts = [f"<h1>{esc(title)}</h1>"]
    info = []
    if head.get("command"):
        cmd = head["command"]
        info.append(("command", " ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd)))
    if head.get("source"):
        info.append(("source", head["source"]))
    if len(df):
        t = epoch_seconds(df["time"])
        info.append(("from", _when(float(t.min()))))
        info.append(("duration", fmt_duration(float(t.max() - t.min()))))
    exits = [e["label"] for e in run.events if e.get("event") == "mark" and "exited" in str(e.get("label"))]
    if exits:
        info.append(("result", exits[-1]))
    if run.skipped_lines:
        info.append(("note", f"{run.skipped_lines} unreadable line(s) skipped (run cut short?)"))
    if not head and run.path.lower().endswith(".csv"):
        info.append(("note", "CSV keeps no command or source; record to .jsonl to keep them"))
    if run.simulated:
        info.append(("note", SIMULATED_NOTE))
    parts.append("<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{esc(str(v))}</dd>" for k, v in info) + "</dl>")

    parts.append("<h2>Summary per GPU</h2>")
    rows = []
    for s in summarize_run(run).rows:
        rows.append([esc(str(s["gpu"])), esc(str(names.get(str(s["gpu"]), ""))),
                     fmt_duration(s["duration_s"]), fmt_pct(s["util_mean_pct"]),
                     fmt_pct(s["util_max_pct"]), fmt_bytes(s["mem_peak_bytes"]),
                     fmt_watts(s["power_mean_w"]), fmt_watts(s["power_max_w"]),
                     fmt_energy(s["energy_j"]), fmt_celsius(s["temp_max_c"]),
                     esc(s["throttle_reasons"] or "no")])
    parts.append(html_table(["GPU", "name", "duration", "util mean", "util max", "memory peak", "power mean",
                             "power max", "energy", "temp max", "throttled"], rows,
                            "No GPU samples were recorded."))

    parts.append("<h2>Timeline</h2>")
    plot_df = df.copy()
    if "gpu" in plot_df:
        plot_df["gpu"] = plot_df["gpu"].astype(str)
    metrics = [m for m in PLOT_METRICS if m in df.columns]
    parts.append(f'<div class="plot">{svg_timeline(plot_df, metrics or None, run.marks(), width=900)}</div>')

    parts.append("<h2>Alerts</h2>")
    parts.append(html_table(["severity", "GPU", "from", "to", "what", "suggestion"], [
        [esc(str(a.get("severity", ""))), esc(str(a.get("gpu_id", ""))), esc(str(a.get("start", ""))),
         esc(str(a.get("end") or "still active at the end")), esc(str(a.get("message", ""))),
         esc(str(a.get("suggestion", "")))] for a in run.alerts()], "No alerts were recorded."))

    parts.append("<h2>Marks and events</h2>")
    parts.append(html_table(["time", "kind", "GPU", "label"], [
        [esc(str(e["timestamp"])), esc(str(e.get("event"))),
         esc("" if e.get("gpu_id") is None else str(e["gpu_id"])), esc(str(e.get("label", "")))]
        for e in run.events if e.get("event") not in ("run", "alert")], "No marks or events."))
    return PAGE.format(title=esc(title), body="\n".join(parts))


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em auto; max-width: 960px; color: #222; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }}
dl {{ display: grid; grid-template-columns: max-content auto; gap: .2em 1em; }} dt {{ color: #666; }}
dd {{ margin: 0; font-family: monospace; }}
table {{ border-collapse: collapse; font-size: .9em; }}
th, td {{ border: 1px solid #ddd; padding: .25em .6em; text-align: right; }}
th {{ background: #f4f4f4; }} td:nth-child(2) {{ text-align: left; }}
.plot svg {{ max-width: 100%; height: auto; }}
</style></head>
<body>
{body}
<p style="color:#888;font-size:.8em">Written by nbgpu.</p>
</body></html>
"""


def summarize_run(run: Run) -> Summary:
    """The figures of a run from ``summarize``, the one summary ``record`` and ``report`` print."""
    if not len(run.frame):
        return Summary([], {})
    return summarize(run.frame, devices=run.devices())


def summary_lines(summary: Summary) -> list[str]:
    """The summary as text, one line per GPU (and one for all when there are several)."""
    rows = list(summary.rows)
    if len(rows) > 1 and summary.combined:
        rows.append({**summary.combined, "gpu": "all"})
    lines = []
    for r in rows:
        g = r.get
        line = (f"GPU {r['gpu']}: util mean {fmt_pct(g('util_mean_pct'))} max {fmt_pct(g('util_max_pct'))}, "
                f"mem peak {fmt_bytes(g('mem_peak_bytes'))}, power mean {fmt_watts(g('power_mean_w'))}, "
                f"energy {fmt_energy(g('energy_j'))}, temp max {fmt_celsius(g('temp_max_c'))}")
        if r.get("throttle_reasons"):
            line += f", throttled ({r['throttle_reasons']})"
        if r.get("resolution_note"):
            line += f"; note: {r['resolution_note']}"
        lines.append(line)
    return lines


def load_input(path: str) -> Run:
    """``load_run`` for the command line: any file that is not a run is one FileError line."""
    try:
        return load_run(path)
    except RecursionError:
        raise FileError(f"cannot read {path}: it is nested too deeply to be a run", path=path) from None


def run_report(path: str, output: str | None = None, title: str | None = None) -> int:
    """Write the HTML report of ``path``; returns the exit code (2: the file is not a run)."""
    out = output or os.path.splitext(path)[0] + ".html"
    refuse_overwrite(out, [path])
    try:
        run = load_input(path)
    except FileError as exc:
        print(f"nbgpu report: error: {exc}", file=sys.stderr)
        return 2
    page = render_html(run, title)
    with atomic_file(out) as fh:
        fh.write(shown(page))
    n = run.frame["gpu"].nunique() if len(run.frame) else 0
    print(f"nbgpu report: {os.path.abspath(out)} ({n} GPU(s), {len(run.frame)} rows)", file=sys.stderr)
    return 0


__all__ = ["PAGE", "Run", "html_table", "load_run", "render_html", "run_report", "summarize_run",
           "summary_lines"]
