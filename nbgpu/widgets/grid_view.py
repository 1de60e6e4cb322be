"""The panel's rows as two widgets: one bqplot figure of every column's sparklines and one
HTML widget of the rows' labels and every column's title and values, laid over the figure.

A refresh then sends two messages (the lines, the texts) whatever the number of columns;
one figure and one HTML per column sent two per column. The figure's x is pixels: column
``c`` draws its lines in ``[c * COLUMN_PX, c * COLUMN_PX + SPARK_PX]`` and its values sit
in the gap right of them, in the HTML layer (which keeps the values' tooltips); the figure
starts right of the labels.
"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np
from bqplot import Figure, Label, LinearScale, Lines

from ..store import MarkFollower
from . import text
from .bands import INSET
from .columns import Column
from .readout import fixed_scale
from .spark import SparkSet

SPARK_PX = text.SPARK_PX
COLUMN_PX = text.COLUMN_PX
RULE_COLOR = "#8a8a8a"
BASE_COLOR = "#8a8a8a"
NO_TRACE_COLOR = "#888"
LOST_COLOR = "#9ca3af"

Trace = tuple[int, object, str, str]  # (band, device key, metric, colour)


def top_of(bands: int) -> float:
    """Top of the y scale: the rows plus the strip for mark labels, in row units."""
    return bands + text.STRIP_PX / text.ROW_PX


def to_px(x_s: np.ndarray, span_s: float, left_px: object) -> np.ndarray:
    """Seconds before now (``-span_s`` … 0) as the figure's x pixels of a column starting at
    ``left_px`` (one per row of ``x_s``, or one for all)."""
    left = np.asarray(left_px, np.float32)
    if left.ndim:
        left = left[:, None]
    return (np.asarray(x_s, np.float32) * np.float32(SPARK_PX / span_s) + (left + SPARK_PX)
            ).astype(np.float32, copy=False)


class PanelGrid:
    """Every row of the panel: the figure (baselines, lines, mark rules, mark labels over the
    first column) and the HTML layer of labels, titles and values, stacked in one grid cell.

    It also keeps what only drawing needs between refreshes (the traces' tables, the buckets,
    the store's cursor, the texts last drawn): a stopped panel drops the grid, and all of it
    with the widgets.
    """

    def __init__(self, columns: list[Column], traces: list[list[Trace]], bands: int) -> None:
        self.traces = [t for per_column in traces for t in per_column]  # column after column
        column = np.array([c for c, per_column in enumerate(traces) for _ in per_column], np.int64)
        self.trace_left_px = (column * COLUMN_PX).astype(np.float32)  # each trace's column's left
        self.trace_keys = [(band, key, metric) for band, key, metric, _ in self.traces]
        self.order = [(key, metric) for _, key, metric in self.trace_keys]  # the store's pairs
        self.trace_bands = np.array([band for band, _, _ in self.trace_keys], np.int64)
        self.fixed_scales = [fixed_scale(metric) for _, _, metric in self.trace_keys]
        self.looked_up = [i for i, scale in enumerate(self.fixed_scales) if scale is None]
        self.scaled: tuple[list, int, np.ndarray, np.ndarray] | None = None  # the panel's _placing
        self.sparks: SparkSet | None = None
        self.cursor: dict | None = None  # the store's cursor after the sparks' last read
        self.colored_for: tuple | None = None  # the lost GPUs the lines' colours were set for
        self.label_key: tuple | None = None  # what the label column was drawn from
        self.labels_html = ""  # the label column's HTML, made again when what it shows changes
        self.last_values: list[list[tuple[str, str, bool]]] = []  # each column's texts drawn last
        self.marks = MarkFollower()  # the marks in the window
        self.marks_window_s: float | None = None  # the window they were kept for
        width_px = max(1, len(columns)) * COLUMN_PX - text.GAP_PX
        sx = LinearScale(min=0.0, max=float(width_px))
        sy = LinearScale(min=0.0, max=top_of(bands))
        self.scales = [sx, sy]
        scales = {"x": sx, "y": sy}
        bx, by = baselines(len(columns), bands)
        self.base = Lines(x=bx, y=by, scales=scales, colors=[BASE_COLOR], opacities=[0.35],
                          stroke_width=0.6)
        x0 = np.zeros((max(1, len(self.traces)), 2), np.float32)
        self.lines = Lines(x=x0, y=np.full_like(x0, np.nan), scales=scales,
                           colors=self.colors(()), stroke_width=1.4)
        self.rules = Lines(x=x0[:1], y=np.full_like(x0[:1], np.nan), scales=scales,
                           colors=[RULE_COLOR], opacities=[0.6], stroke_width=0.6)
        self.labels = Label(x=[0.0], y=[top_of(bands)], text=[""], scales=scales,
                            colors=[RULE_COLOR], default_size=9, font_unit="px", align="end",
                            x_offset=-2, y_offset=9, visible=False, apply_clip=False)
        height = f"{bands * text.ROW_PX + text.STRIP_PX}px"
        self.figure = Figure(
            marks=[self.base, self.lines, self.rules, self.labels], scale_x=sx, scale_y=sy,
            padding_x=0.0, padding_y=0.0, fig_margin={"top": 0, "bottom": 0, "left": 0, "right": 0},
            min_aspect_ratio=1e-4, max_aspect_ratio=1e4, animation_duration=0,
            background_style={"fill": "none"}, display_toolbar=False,
            layout=widgets.Layout(width=f"{width_px}px", height=height, min_width=f"{width_px}px",
                                  min_height=height, margin=f"{text.TITLE_PX}px 0 0 {text.LABEL_PX}px",
                                  padding="0", overflow="hidden", grid_area="cell"))
        self.figure.add_class("nbgpu-spark")
        self.titles = [text.title_html(col.title, col.help) for col in columns]
        self.tips = [col.help for col in columns]  # what a live value's row says on hover
        self.values = widgets.HTML(text.grid_html("", self.titles, [[] for _ in columns]),
                                   layout=widgets.Layout(margin="0", grid_area="cell"))
        self.box = widgets.GridBox([self.figure, self.values], layout=widgets.Layout(
            grid_template_areas='"cell"', grid_template_columns=f"{text.LABEL_PX + width_px}px", margin="0",
            flex="0 0 auto"))
        self.had_rules = False
        self.sent_px: tuple[np.ndarray, np.ndarray] | None = None  # the lines last sent, in pixels

    def colors(self, lost: object) -> list[str]:
        """Each trace's colour, grey for a lost GPU's (one colour where there is no trace)."""
        return [LOST_COLOR if key in lost else color for _, key, _, color in self.traces] \
            or [NO_TRACE_COLOR]

    def widgets(self) -> list:
        return [*self.scales, self.base, self.lines, self.rules, self.labels, self.figure,
                self.values, self.box]


def moved(xy: tuple[np.ndarray, np.ndarray], sent: tuple | None) -> tuple | None:
    """``xy`` (the lines' x pixels, y rows) in whole pixels; None where ``sent`` drew the same."""
    px = (np.round(xy[0]), np.round(xy[1] * np.float32(text.ROW_PX)))
    if sent is not None and all(np.array_equal(a, b, equal_nan=True) for a, b in zip(px, sent, strict=True)):
        return None
    return px


def baselines(columns: int, bands: int) -> tuple[np.ndarray, np.ndarray]:
    """Faint lines under each band of each column (the 0 of its scale), as 2-D arrays."""
    lefts = np.repeat(np.arange(max(1, columns), dtype=np.float32) * COLUMN_PX, max(1, bands))
    x = np.stack([lefts, lefts + SPARK_PX], axis=1)
    y = np.tile(np.arange(max(1, bands), dtype=np.float32) + np.float32(INSET), max(1, columns))
    return x, np.stack([y, y], axis=1)
