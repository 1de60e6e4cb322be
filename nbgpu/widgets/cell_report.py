"""A cell's reports: its capture's interactive chart, with static SVG and HTML beside it so a
notebook saved without widget state still shows it (GitHub, nbviewer, nbconvert), and the OOM
post-mortem (static HTML and SVG only)."""

from __future__ import annotations

import contextlib
import datetime as _dt
from html import escape
from typing import TYPE_CHECKING

import numpy as np

from ..decimate import decimate_minmax
from ..metrics import BY_NAME, GPU_METRICS
from ..profiles import render as report
from ..svg import COLORS, _scale_for, label_rows, svg_series
from ..units import GIB

if TYPE_CHECKING:
    from ..profiles.capture import Capture
    from ..profiles.oom import PostMortem

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class CellReport:
    """A capture's report: interactive chart in a live kernel, static SVG + table everywhere."""

    def __init__(self, cap: Capture) -> None:
        self.cap = cap

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        cap = self.cap
        if report.no_gpu(cap):  # one line saying so and how to simulate GPUs, no empty chart
            return {"text/plain": f"{report._title(cap)}\n{report.NO_GPU_LINE}",
                    "text/html": report.static_html(cap)}
        svg = report.static_svg(cap)
        lines = (report._title(cap), cap.one_line(), report.where_line(cap), report.judged_line(cap))
        bundle = {"text/plain": "\n".join(x for x in lines if x), "text/html": report.static_html(cap, svg),
                  "image/svg+xml": svg}
        with contextlib.suppress(Exception):  # no widget front end (plain IPython, scripts)
            bundle[WIDGET_VIEW] = build_widget(cap)._repr_mimebundle_()[WIDGET_VIEW]
        return bundle


def _axis(metric: str) -> tuple[str, float]:
    """The axis label of ``metric`` (memory and rates in GiB, as nvidia-smi) and the factor from
    its stored unit."""
    div, unit = _scale_for(metric, GIB)
    return (f"{BY_NAME[metric].label} ({unit})", 1 / div) if metric in BY_NAME else (metric, 1.0)


LINES_TOP = 0.8  # lines stay below this fraction of the chart's height; mark labels sit above


def y_range(metric: str, values) -> tuple[float, float]:
    """From 0 (or the lowest value, if negative) to the top value (100 for percentages) over
    LINES_TOP: noise never looks like swings and the mark labels above cover no line."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    lo = min(0.0, float(v.min())) if len(v) else 0.0
    m = BY_NAME.get(metric)
    top = 100.0 if m is not None and m.percent else (float(v.max()) if len(v) else 1.0)
    top = top if top > lo else lo + 1.0
    return lo, lo + (top - lo) / LINES_TOP


def legend_html(gpus: list, colors: list[str]) -> str:
    """The chart's legend as a line of HTML above it (inside the chart it would cover data)."""
    items = "".join(f'<span style="margin-right:12px;white-space:nowrap"><span style="display:inline-block;'
                    f'width:14px;height:3px;background:{colors[i % len(colors)]};vertical-align:middle">'
                    f"</span> GPU {escape(str(g))}</span>" for i, g in enumerate(gpus))
    return f'<div class="nbgpu-legend" style="font-size:12px">{items}</div>'


def build_widget(cap: Capture):
    """The interactive report: a metric picker and a bqplot chart, one line per GPU, marks."""
    import bqplot as bq
    import ipywidgets as w

    window, gpus = cap.window, cap.gpu_keys()
    candidates = list(dict.fromkeys([*report.REPORT_METRICS, *(m.name for m in GPU_METRICS)]))
    metrics = [m for m in candidates if m not in ("mem_total_bytes", "energy_j")
               and any(len(window.series(g, m)[0]) for g in gpus)]
    x_sc, y_sc = bq.LinearScale(min=0.0, max=max(float(cap.duration_s), 1e-3)), bq.LinearScale()
    mark_sc = bq.LinearScale(min=0.0, max=1.0)
    lines = [bq.Lines(x=np.array([]), y=np.array([]), scales={"x": x_sc, "y": y_sc},
                      colors=[COLORS[i % len(COLORS)]], labels=[f"GPU {g}"])
             for i, g in enumerate(gpus)]
    marks = sorted(cap.marks)
    rules = []
    if marks:
        mx = np.array([[t - cap.start_time] * 2 for t, _ in marks])
        rules.append(bq.Lines(x=mx, y=np.array([[0.0, 1.0]] * len(marks)), scales={"x": x_sc, "y": mark_sc},
                              colors=["#555"], line_style="dashed"))
        # Rows of labels in the band above the lines; a chart about 800 px wide places them.
        span = max(float(cap.duration_s), 1e-3)
        placed = label_rows([800 * float(x) / span for x in mx[:, 0]], [lb for _, lb in marks], 800)
        band = (1.0 - LINES_TOP) / (max(r for *_, r in placed) + 1)
        for (_, anchor, row), x, (_, text) in zip(placed, mx[:, 0], marks, strict=True):
            rules.append(bq.Label(x=[x], y=[1.0 - band * (row + 0.4)], text=[text], align=anchor,
                                  x_offset=3 if anchor == "start" else -3, scales={"x": x_sc, "y": mark_sc},
                                  colors=["#333"], font_weight="normal", default_size=11))
    ax_y = bq.Axis(scale=y_sc, side="left", tick_format=".3~s")
    started = _dt.datetime.fromtimestamp(cap.start_time, _dt.timezone.utc).strftime("%H:%M:%S")
    ax_x = bq.Axis(scale=x_sc, label=f"seconds since the cell started (at {started} UTC)",
                   tick_format=".3~g")
    fig = bq.Figure(marks=lines + rules, axes=[ax_x, ax_y],
                    layout=w.Layout(width="100%", height="280px"),
                    fig_margin={"top": 20, "bottom": 40, "left": 60, "right": 20})
    picker = w.Dropdown(options=[(_axis(m)[0], m) for m in metrics],
                        value=metrics[0] if metrics else None, description="metric")

    def show(metric: str | None) -> None:
        if metric is None:
            return
        ax_y.label, scale = _axis(metric)
        series = (decimate_minmax(*window.series(g, metric), report.WIDGET_MAX_POINTS // 2) for g in gpus)
        drawn = [(t - cap.start_time, v * scale) for t, v in series]
        with fig.hold_sync():
            y_sc.min, y_sc.max = y_range(metric, np.concatenate([v for _, v in drawn]) if drawn else [])
            for line, (x, y) in zip(lines, drawn, strict=True):
                line.x, line.y = x, y

    picker.observe(lambda change: show(change["new"]), names="value")
    show(picker.value)
    return w.VBox([w.HTML(f"<b>{escape(report._title(cap))}</b>"), picker, w.HTML(legend_html(gpus, COLORS)),
                   fig, w.HTML(report.where_html(cap) + report.summary_html(cap.summary_rows, cap.totals))])


class OomReport:
    """Display data of a ``PostMortem``: its plain-text story, and as HTML the story over the
    cell's memory used per GPU with the failure marked."""

    def __init__(self, post_mortem: PostMortem) -> None:
        self.post_mortem = post_mortem

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        cap, story, text = self.post_mortem.capture, self.post_mortem.story, self.post_mortem.text()
        window = cap.sampler.timeline.between(cap.start_time, max(story.failed_at, cap.start_time))
        data = {"mem_used_bytes": {g.gpu: window.series(g.gpu, "mem_used_bytes") for g in story.gpus}}
        svg = svg_series(data, [(story.failed_at, "out of memory")], 720, [g.gpu for g in story.gpus])
        return {"text/plain": text, "text/html": f'<div class="nbgpu-oom-report"><pre class="nbgpu-oom" '
                f'style="white-space:pre-wrap">{escape(text)}</pre><div>{svg}</div></div>'}
