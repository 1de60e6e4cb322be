"""The widgets of one metric column: a title, a bqplot figure of every row's sparkline
(baselines, lines, mark rules, mark labels) and the current values as one HTML widget."""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
from bqplot import Figure, Label, LinearScale, Lines

from . import text
from .bands import baselines
from .columns import Column

SPARK_PX = 76
VALUE_PX = 72
RULE_COLOR = "#8a8a8a"
BASE_COLOR = "#8a8a8a"


def top_of(bands: int) -> float:
    """Top of the y scale: the rows plus the strip for mark labels, in row units."""
    return bands + text.STRIP_PX / text.ROW_PX


class ColumnView:
    """The widgets of one metric column: title, figure (base, lines, rules) and values."""

    def __init__(self, col: Column, traces: list[tuple[int, object, str, str]], bands: int,
                 sx: LinearScale, sy: LinearScale, window_s: float, with_labels: bool) -> None:
        self.col = col
        self.traces = traces  # (band, device key, metric, color)
        scales = {"x": sx, "y": sy}
        bx, by = baselines(bands, window_s)
        self.base = Lines(x=bx, y=by, scales=scales, colors=[BASE_COLOR], opacities=[0.35],
                          stroke_width=0.6)
        x0 = np.full((max(1, len(traces)), 2), -window_s, np.float32)
        self.lines = Lines(x=x0, y=np.full_like(x0, np.nan), scales=scales,
                           colors=[t[3] for t in traces] or ["#888"], stroke_width=1.4)
        self.rules = Lines(x=x0[:1], y=np.full_like(x0[:1], np.nan), scales=scales,
                           colors=[RULE_COLOR], line_style="dashed", stroke_width=1)
        marks = [self.base, self.lines, self.rules]
        self.labels = None
        if with_labels:
            self.labels = Label(x=[-window_s], y=[top_of(bands)], text=[""], scales=scales,
                                colors=[RULE_COLOR], default_size=9, font_unit="px",
                                align="end", x_offset=-2, y_offset=9, visible=False,
                                apply_clip=False)
            marks.append(self.labels)
        height = f"{bands * text.ROW_PX + text.STRIP_PX}px"
        self.figure = Figure(
            marks=marks, scale_x=sx, scale_y=sy, padding_x=0.0, padding_y=0.0,
            fig_margin={"top": 0, "bottom": 0, "left": 0, "right": 0},
            min_aspect_ratio=1e-4, max_aspect_ratio=1e4, animation_duration=0,
            background_style={"fill": "none"}, display_toolbar=False,
            layout=widgets.Layout(width=f"{SPARK_PX}px", height=height, min_width=f"{SPARK_PX}px",
                                  min_height=height, margin="0", padding="0", overflow="hidden",
                                  flex="0 0 auto"))
        self.figure.add_class("nbgpu-spark")
        self.values = widgets.HTML(layout=widgets.Layout(width=f"{VALUE_PX}px", margin="0",
                                                         flex="0 0 auto"))
        self.title = widgets.HTML(text.title_html(col.title, col.help),
                                  layout=widgets.Layout(margin="0 0 2px 0"))
        self.box = widgets.VBox([self.title, widgets.HBox([self.figure, self.values],
                                                          layout=widgets.Layout(margin="0"))],
                                layout=widgets.Layout(margin="0 4px 0 0", flex="0 0 auto"))
        self.had_rules = False

    def widgets(self) -> list:
        out = [self.base, self.lines, self.rules, self.figure, self.values, self.title, self.box]
        return out + ([self.labels] if self.labels is not None else [])
