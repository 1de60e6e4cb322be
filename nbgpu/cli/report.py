"""``nbgpu report``: one self-contained HTML file from a recorded run (inline SVG and styles, no
script); a torn last line is skipped and counted; a file that is not a run is one line, exit 2."""

from __future__ import annotations

import html
import math
import os
import sys

from ..errors import BadArgumentError, FileError
from ..files import atomic_file, iso
from ..profiles.summary import Summary, summarize
from ..runfile import Run, load_run
from ..timeline import epoch_seconds
from ..units import fmt_bytes, fmt_celsius, fmt_duration, fmt_energy, fmt_pct, fmt_watts
from .shared_options import refuse_overwrite, shown

PLOT_METRICS = ("util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_active_pct", "sm_clock_mhz",
                "proc_cpu_pct")


SIMULATED_NOTE = "SIMULATED GPUs: these numbers are made up for demos and tests"


def html_table(head: list[str], rows: list[list[object]], empty: str = "") -> str:
    """An HTML table of ``rows`` (escaped here) under ``head``; ``empty`` said without rows."""
    if empty and not rows:
        return f"<p>{empty}</p>"
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


_FMT = {"_bytes": fmt_bytes, "_s": fmt_duration, "_j": fmt_energy, "_pct": fmt_pct, "_w": fmt_watts,
        "_c": fmt_celsius}
# The figures of a run as record, report and compare name them: heading and figure.
SUMMARY = {"duration": "duration_s", "util mean": "util_mean_pct", "util max": "util_max_pct",
           "peak memory": "mem_peak_bytes", "power mean": "power_mean_w", "power max": "power_max_w",
           "energy": "energy_j", "temp max": "temp_max_c"}


def fmt_metric(metric: str, value: float, signed: bool = False, points: bool = False) -> str:
    """A figure of ``metric`` as a person reads it; ``points``: percentages differ in ``pp``."""
    if value is None or not math.isfinite(value):
        return "–"
    sign = "-" if value < 0 else "+" if signed else ""
    if points and metric.endswith("_pct"):
        return f"{sign}{abs(value):.1f}".rstrip("0").rstrip(".") + " pp"
    fmt = next((f for suffix, f in _FMT.items() if metric.endswith(suffix)), None)
    return sign + (fmt(abs(value)) if fmt is not None else f"{abs(value):g}")


def _info(run: Run) -> list[tuple[str, object]]:
    """The facts of the run's header: command, source, span, result and notes (falsy: left out)."""
    cmd, t = run.header.get("command"), epoch_seconds(run.frame["time"]) if len(run.frame) else None
    exits = [e["label"] for e in run.events if e.get("event") == "mark" and "exited" in str(e.get("label"))]
    csv = not run.header and run.path.lower().endswith(".csv")
    return [("command", " ".join(map(str, cmd)) if isinstance(cmd, list) else cmd),
            ("source", run.header.get("source")),
            ("from", t is not None and iso(float(t.min()), "seconds")),
            ("duration", t is not None and fmt_duration(float(t.max() - t.min()))),
            ("result", exits and exits[-1]),
            ("note", run.skipped_lines
             and f"{run.skipped_lines} unreadable line(s) skipped (run cut short?)"),
            ("note", csv and "CSV keeps no command or source; record to .jsonl to keep them"),
            ("note", run.simulated and SIMULATED_NOTE)]


def render_html(run: Run, title: str | None = None) -> str:
    """The report of ``run`` as one HTML document (no scripts, no external resources)."""
    from ..svg import svg_timeline

    esc = html.escape
    names = {str(d.get("index")): d.get("name", "") for d in run.devices()}
    title = title or f"nbgpu run: {os.path.basename(run.path)}"
    rows = [[s["gpu"], names.get(str(s["gpu"]), ""), *(fmt_metric(k, s[k]) for k in SUMMARY.values()),
             s["throttle_reasons"] or "no"] for s in summarize_run(run).rows]
    alerts = [[a.get("severity", ""), a.get("gpu_id", ""), a.get("start", ""),
               a.get("end") or "still active at the end", a.get("message", ""), a.get("suggestion", "")]
              for a in run.events if a.get("event") == "alert"]
    events = [[e["timestamp"], e.get("event"), "" if e.get("gpu_id") is None else e["gpu_id"],
               e.get("label", "")] for e in run.events if e.get("event") not in ("run", "alert")]
    plot_df = run.frame.astype({"gpu": str}) if "gpu" in run.frame else run.frame
    metrics = [m for m in PLOT_METRICS if m in plot_df.columns]
    parts = [f"<h1>{esc(title)}</h1>",
             "<dl>" + "".join(f"<dt>{k}</dt><dd>{esc(str(v))}</dd>" for k, v in _info(run) if v) + "</dl>",
             "<h2>Summary per GPU</h2>",
             html_table(["GPU", "name", *SUMMARY, "throttled"], rows, "No GPU samples were recorded."),
             "<h2>Timeline</h2>",
             f'<div class="plot">{svg_timeline(plot_df, metrics or None, run.marks(), width=900)}</div>',
             "<h2>Alerts</h2>",
             html_table(["severity", "GPU", "from", "to", "what", "suggestion"], alerts,
                        "No alerts were recorded."),
             "<h2>Marks and events</h2>",
             html_table(["time", "kind", "GPU", "label"], events, "No marks or events.")]
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
    """The summary's figures as text, one line per GPU (and one for all when there are several)."""
    rows = list(summary.rows)
    if len(rows) > 1 and summary.combined:
        rows.append({**summary.combined, "gpu": "all"})
    return [f"GPU {r['gpu']}: " + ", ".join(f"{h} {fmt_metric(k, r.get(k))}" for h, k in SUMMARY.items())
            + (f", throttled ({r['throttle_reasons']})" if r.get("throttle_reasons") else "")
            + (f"; note: {r['resolution_note']}" if r.get("resolution_note") else "") for r in rows]


def load_input(path: str) -> Run:
    """``load_run`` for the command line: a file that is not a run is bad input (one line, exit 2)."""
    try:
        return load_run(path)
    except FileError as exc:
        raise BadArgumentError(str(exc)) from None
    except RecursionError:
        raise BadArgumentError(f"cannot read {path}: it is nested too deeply to be a run") from None


def run_report(path: str, output: str | None = None, title: str | None = None) -> int:
    """Write the HTML report of ``path``; BadArgumentError when it is not a run."""
    out = output or os.path.splitext(path)[0] + ".html"
    refuse_overwrite(out, [path])
    run = load_input(path)
    with atomic_file(out) as fh:
        fh.write(shown(render_html(run, title)))
    n = run.frame["gpu"].nunique() if len(run.frame) else 0
    print(f"nbgpu report: {os.path.abspath(out)} ({n} GPU(s), {len(run.frame)} rows)", file=sys.stderr)
    return 0
