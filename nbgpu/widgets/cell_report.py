"""The cell report widget: a capture's interactive chart, with static SVG and HTML fallbacks.

The display data carries the static SVG picture and HTML table beside the widget view, so a
notebook saved without widget state still shows the profile on GitHub, nbviewer and in
``jupyter nbconvert --to html``.
"""

from __future__ import annotations

import datetime as _dt
from html import escape
from typing import TYPE_CHECKING

from ..metrics import GPU_METRICS
from ..profiles.report import (
    NO_GPU_LINE,
    REPORT_METRICS,
    WIDGET_MAX_POINTS,
    _gpus,
    _title,
    judged_line,
    no_gpu,
    static_html,
    static_svg,
    summary_html,
    where_html,
    where_line,
)
from ..units import GIB

if TYPE_CHECKING:
    from ..profiles.capture import Capture


class CellReport:
    """A capture's report: interactive chart in a live kernel, static SVG + table everywhere."""

    def __init__(self, cap: Capture, interactive: bool = True) -> None:
        self.cap = cap
        self.interactive = interactive
        self.widget = None

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        if no_gpu(self.cap):  # one line saying so and how to simulate GPUs, no empty chart
            self.widget = None
            return {"text/plain": f"{_title(self.cap)}\n{NO_GPU_LINE}", "text/html": static_html(self.cap)}
        svg = static_svg(self.cap)
        bundle = {
            "text/plain": "\n".join(x for x in (_title(self.cap), self.cap.one_line(),
                                                 where_line(self.cap), judged_line(self.cap)) if x),
            "text/html": static_html(self.cap, svg),
            "image/svg+xml": svg,
        }
        if self.interactive:
            try:
                self.widget = build_widget(self.cap)
                view = self.widget._repr_mimebundle_()
            except Exception:  # no widget front end (plain IPython, scripts)
                view = None
            if view and "application/vnd.jupyter.widget-view+json" in view:
                bundle["application/vnd.jupyter.widget-view+json"] = \
                    view["application/vnd.jupyter.widget-view+json"]
        return bundle


def _metric_label(metric: str) -> str:
    """``util (%)``, ``memory (GiB)``: the metric table's label and the unit the axis shows."""
    from ..metrics import BY_NAME

    m = BY_NAME.get(metric)
    if m is None:
        return metric
    return f"{m.label} ({_AXIS_UNITS.get(m.unit, (m.unit, 1.0))[0]})"


# Units a person reads on the axis: memory in GiB (as nvidia-smi), rates in GiB/s.
_AXIS_UNITS = {"B": ("GiB", 1 / GIB), "B/s": ("GiB/s", 1 / GIB)}


def axis_values(cap: Capture, metric: str, t, v):
    """(seconds since the block started, values in the axis unit) of one series."""
    from ..metrics import BY_NAME

    m = BY_NAME.get(metric)
    scale = _AXIS_UNITS.get(m.unit, ("", 1.0))[1] if m else 1.0
    return t - cap.start_time, v * scale


def y_range(metric: str) -> tuple[float | None, float | None]:
    """A fixed 0–100 scale for percentages (as in the panel); None lets the axis fit the data."""
    from ..metrics import BY_NAME

    m = BY_NAME.get(metric)
    return (0.0, 100.0) if m is not None and m.percent else (None, None)


def build_widget(cap: Capture):
    """The interactive report: a metric picker and a bqplot chart, one line per GPU, marks."""
    import bqplot as bq
    import ipywidgets as w
    import numpy as np

    from ..decimate import decimate_minmax

    if no_gpu(cap):
        return w.VBox([w.HTML(f"<b>{escape(_title(cap))}</b>"), w.HTML(escape(NO_GPU_LINE))])
    window, gpus = cap.window, _gpus(cap)
    candidates = list(dict.fromkeys([*REPORT_METRICS, *(m.name for m in GPU_METRICS)]))
    metrics = [m for m in candidates if m not in ("mem_total_bytes", "energy_j")
               and any(len(window.series(g, m)[0]) for g in gpus)]
    x_sc, y_sc = bq.LinearScale(min=0.0, max=max(float(cap.duration_s), 1e-3)), bq.LinearScale()
    mark_sc = bq.LinearScale(min=0.0, max=1.0)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    lines = [bq.Lines(x=np.array([]), y=np.array([]), scales={"x": x_sc, "y": y_sc},
                      colors=[colors[i % len(colors)]], labels=[f"GPU {g}"], display_legend=True)
             for i, g in enumerate(gpus)]
    marks = cap.marks
    rules = []
    if marks:
        mx = np.array([[t - cap.start_time] * 2 for t, _ in marks])
        rules.append(bq.Lines(x=mx, y=np.array([[0.0, 1.0]] * len(marks)), scales={"x": x_sc, "y": mark_sc},
                              colors=["#555"], line_style="dashed"))
        rules.append(bq.Label(x=mx[:, 0], y=np.full(len(marks), 0.95), text=[lb for _, lb in marks],
                              scales={"x": x_sc, "y": mark_sc}, colors=["#333"], font_weight="normal",
                              default_size=11))
    ax_y = bq.Axis(scale=y_sc, side="left", tick_format=".3~s")
    started = _dt.datetime.fromtimestamp(cap.start_time, _dt.timezone.utc).strftime("%H:%M:%S")
    ax_x = bq.Axis(scale=x_sc, label=f"seconds since the cell started (at {started} UTC)",
                   tick_format=".3~g")
    fig = bq.Figure(marks=lines + rules, axes=[ax_x, ax_y],
                    layout=w.Layout(width="100%", height="280px"),
                    fig_margin={"top": 20, "bottom": 40, "left": 60, "right": 20},
                    legend_location="top-left")
    picker = w.Dropdown(options=[(_metric_label(m), m) for m in metrics],
                        value=metrics[0] if metrics else None, description="metric")

    def show(metric: str | None) -> None:
        if metric is None:
            return
        ax_y.label = _metric_label(metric)
        with fig.hold_sync():
            y_sc.min, y_sc.max = y_range(metric)
            for line, g in zip(lines, gpus, strict=True):
                t, v = decimate_minmax(*window.series(g, metric), WIDGET_MAX_POINTS // 2)
                line.x, line.y = axis_values(cap, metric, t, v)

    picker.observe(lambda change: show(change["new"]), names="value")
    show(picker.value)
    return w.VBox([w.HTML(f"<b>{escape(_title(cap))}</b>"), picker, fig,
                   w.HTML(where_html(cap) + summary_html(cap.summary_rows))])
