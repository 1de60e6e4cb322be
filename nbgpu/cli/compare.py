"""``nbgpu compare BASE NEW``: two recorded runs side by side (per figure, per GPU and over all,
with the change and whether it is beyond noise), an HTML report, and ``--fail-if`` as a CI gate."""

from __future__ import annotations

import html
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import BadArgumentError
from ..files import atomic_file
from ..profiles.comparison import (
    NOISE_METRICS,
    Bound,
    Change,
    Figure,
    RunFigures,
    changes,
    fmt_change_pct,
    gpu_figures,
    parse_bound,
    total_figures,
    verdict,
)
from ..profiles.cost import cost_of
from ..profiles.summary import summarize
from ..runfile import Run
from ..svg import series_of_frame
from ..timeline import epoch_seconds
from ..units import as_float
from .report import PAGE, SIMULATED_NOTE, SUMMARY, fmt_metric, html_table, load_input
from .shared_options import refuse_overwrite, shown

PLOT_METRICS = ("mem_used_bytes", "util_pct", "power_w")
LABELS = {metric: heading for heading, metric in SUMMARY.items()}


@dataclass
class Side:
    """One run of the comparison: its file, totals, compared figures and file name."""

    run: Run
    totals: dict
    figures: RunFigures
    name: str


def side_of(run: Run) -> Side:
    """A loaded run's totals and figures with their noise, from the command's start to its exit marks
    where it has both."""
    starts = [t for t, label in run.marks() if label == "command started"]
    ends = [t for t, label in run.marks() if label.startswith("command exited")]
    span = (starts[0], ends[-1]) if starts and ends and ends[-1] > starts[0] else None
    summary = summarize(run.frame, *(span or (None, None)), devices=run.devices())
    series = series_of_frame(run.frame, NOISE_METRICS)
    per_gpu = {r["gpu"]: gpu_figures(r, series.get(r["gpu"], {}), stamped=span is not None)
               for r in summary.rows}
    return Side(run, summary.combined, RunFigures(total_figures(per_gpu, summary.combined), per_gpu),
                os.path.basename(run.path))


def _pct(c: Change) -> str:
    return f" ({'+' if c.pct >= 0 else '-'}{fmt_change_pct(abs(c.pct))})" if math.isfinite(c.pct) else ""


def _change_cells(c: Change) -> list[str]:
    same = {True: "changed", False: "within noise", None: "cannot tell"}[c.beyond_noise]
    why = f"± {fmt_metric(c.metric, c.noise, points=True)}" if math.isfinite(c.noise) else "too few readings"
    return [fmt_metric(c.metric, c.before.value), fmt_metric(c.metric, c.after.value),
            fmt_metric(c.metric, c.delta, signed=True, points=True) + _pct(c), f"{same} ({why})"]


def table_rows(a: Side, b: Side) -> list[tuple[str, str, list[str]]]:
    """(scope, figure, [A, B, change, noise verdict]) rows: per GPU present in both, then all GPUs."""
    pairs = [(f"GPU {g}", figs, b.figures.per_gpu[g]) for g, figs in a.figures.per_gpu.items()
             if g in b.figures.per_gpu] + [("all GPUs", a.figures.total, b.figures.total)]
    out = [(scope, LABELS[c.metric], _change_cells(c)) for scope, fa, fb in pairs for c in changes(fa, fb)]
    ca, cb = cost_of(as_float(a.totals.get("energy_j"))), cost_of(as_float(b.totals.get("energy_j")))
    priced = math.isfinite(ca.cost) or math.isfinite(ca.co2_g)
    out.append(("all GPUs", "cost" if priced else "energy in kWh", [ca.text(), cb.text(), "", ""]))
    return out


def text_table(a: Side, b: Side) -> str:
    """The side-by-side table as aligned text."""
    head = ["", "figure", a.name, b.name, "change", "noise"]
    body = [[scope, fig, *cells] for scope, fig, cells in table_rows(a, b)]
    widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *body]]
    only = [f"GPU {g} only in {s.name}" for s, o in ((a, b), (b, a))
            for g in s.figures.per_gpu if g not in o.figures.per_gpu]
    tail = [f"verdict: {verdict(changes(a.figures.total, b.figures.total))}", *only, *simulated_lines(a, b)]
    return "\n".join(lines + tail)


def simulated_lines(a: Side, b: Side) -> list[str]:
    """``SIMULATED GPUs: … (base.jsonl, new.jsonl)`` when either run was simulated."""
    names = [s.name for s in (a, b) if s.run.simulated]
    return [f"{SIMULATED_NOTE} ({', '.join(names)})"] if names else []


def broken_lines(bounds: Sequence[Bound], a: Side, b: Side) -> list[str]:
    """One line per bound the new run breaks: the bound, both figures, the change, the limit."""
    out = []
    for bound in bounds:
        base, new = as_float(a.totals.get(bound.metric)), as_float(b.totals.get(bound.metric))
        if not bound.broken(base, new):
            continue
        if not (math.isfinite(base) and math.isfinite(new)):
            missing = a.name if not math.isfinite(base) else b.name
            out.append(f"FAIL {bound.text}: {bound.metric} not measured in {missing}")
            continue
        pct = _pct(Change(bound.metric, Figure(base, math.nan), Figure(new, math.nan)))
        out.append(f"FAIL {bound.text}: {fmt_metric(bound.metric, base)} → {fmt_metric(bound.metric, new)}"
                   f"{pct}, limit {fmt_metric(bound.metric, bound.limit(base))}")
    return out


def render_html(a: Side, b: Side, broken: Sequence[str] = ()) -> str:
    """The comparison as one HTML document: the table and both timelines on one elapsed-time axis."""
    from ..svg import svg_series

    esc = html.escape
    title = f"nbgpu compare: {a.name} vs {b.name}"
    parts = [f"<h1>{esc(title)}</h1>",
             f"<p>A = <code>{esc(a.run.path)}</code>, B = <code>{esc(b.run.path)}</code>. "
             "Times are seconds since each run's first reading.</p>",
             f"<p><b>{esc(verdict(changes(a.figures.total, b.figures.total)))}</b></p>",
             *(f'<p style="color:#a33"><b>{esc(line)}</b></p>' for line in simulated_lines(a, b))]
    if broken:
        parts.append("<h2>Gate</h2>" + "".join(f'<p style="color:#a33">{esc(x)}</p>' for x in broken))
    parts.append("<h2>Side by side</h2>")
    parts.append(html_table(["", "figure", f"A {a.name}", f"B {b.name}", "change", "noise"],
                        [[s, f, *cells] for s, f, cells in table_rows(a, b)]))
    data: dict = {m: {} for m in PLOT_METRICS}  # {metric: {"GPU (A)": (s since A's first reading, values)}}
    marks: list[tuple[float, str]] = []
    for side, tag in ((a, "A"), (b, "B")):
        t0 = float(epoch_seconds(side.run.frame["time"]).min())
        for g, per in series_of_frame(side.run.frame, NOISE_METRICS).items():
            for m in (m for m in PLOT_METRICS if m in per):
                data[m][f"{g} ({tag})"] = (per[m][0] - t0, per[m][1])
        marks += [(t - t0, f"{tag}: {label}") for t, label in side.run.marks()]
    data = {m: per for m, per in data.items() if per}
    keys = list(dict.fromkeys(k for per in data.values() for k in per))
    parts.append("<h2>Timelines (elapsed seconds)</h2>")
    dashed = {k for k in keys if k.endswith("(B)")}
    parts.append(f'<div class="plot">{svg_series(data, marks, 900, keys, dashed)}</div>')
    return PAGE.format(title=esc(title), body="\n".join(parts))


def run_compare(base: str, new: str, output: str | None = None, fail_if: Sequence[str] = ()) -> int:
    """Print the comparison of ``base`` and ``new``; write HTML to ``output``; apply the bounds."""
    bounds = [parse_bound(text) for text in fail_if]  # a bad bound fails before any reading
    if output:
        refuse_overwrite(output, [base, new])
    runs = [load_input(path) for path in (base, new)]
    if empty := [run.path for run in runs if not len(run.frame)]:
        raise BadArgumentError(f"{empty[0]} has no GPU readings; nothing to compare")
    a, b = side_of(runs[0]), side_of(runs[1])
    print(shown(text_table(a, b)))
    broken = broken_lines(bounds, a, b)
    if output:
        with atomic_file(output) as fh:
            fh.write(shown(render_html(a, b, broken)))
        print(f"nbgpu compare: {os.path.abspath(output)}", file=sys.stderr)
    for line in broken:
        print(f"nbgpu compare: {line}", file=sys.stderr)
    if bounds and not broken:
        print(f"nbgpu compare: all {len(bounds)} bound(s) hold", file=sys.stderr)
    return 1 if broken else 0
