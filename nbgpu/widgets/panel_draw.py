"""How a ``GPUMonitor`` draws: one bqplot figure of every sparkline and one HTML widget over it
(labels, titles, values), so a refresh sends two messages whatever the number of columns. The
figure's x is pixels (column ``c`` draws from ``c * COLUMN_PX``, ``SPARK_PX`` wide, its values
right of that); row ``r`` of ``n`` is the band ``[n - 1 - r, n - r]`` of y."""

from __future__ import annotations

import getpass
import math

import ipywidgets as widgets
import numpy as np
from bqplot import Figure, Label, LinearScale, Lines

from ..decimate import positions
from ..diagnostics.owners import tree_pids, users_line, who_uses
from ..metrics import HOST_KEY
from ..sources.base import Device, HostOnlySource
from ..store import MarkFollower
from . import text
from .columns import Column, plain_reason
from .spark import SparkSet
from .text import _NO_ROW, COLUMN_PX, SPARK_PX, _escape, band_scale, fixed_scale, value_texts

INSET = 0.12  # fraction of a band left empty above and below the line
RULE_COLOR = "#8a8a8a"
NO_TRACE_COLOR = "#888"
LOST_COLOR = "#9ca3af"
MARK_LABEL_PX = 40  # closer mark labels are dropped (the older one), the rules stay
BUCKETS = SPARK_PX // 2  # min and max of each 2-pixel slice: about one point per pixel
HOST_COLOR = "#0d9488"
MIN_SPAN_S = 10.0  # a fresh sampler's panel shows at least this many seconds
SPAN_GROWTH = 1.5  # and then spans this much longer each time its history outgrows one

Trace = tuple[int, object, str, str]  # (band, device key, metric, colour)


def top_of(bands: int) -> float:
    """Top of the y scale: the rows plus the strip for mark labels, in row units."""
    return bands + text.STRIP_PX / text.ROW_PX


def to_px(x_s: np.ndarray, span_s: float, left_px: object) -> np.ndarray:
    """Seconds before now (``-span_s`` … 0) as the figure's x pixels of a column starting at
    ``left_px`` (one per row of ``x_s``, or one for all)."""
    left = np.asarray(left_px, np.float32).reshape(-1, 1) if np.ndim(left_px) else np.float32(left_px)
    return (np.asarray(x_s, np.float32) * np.float32(SPARK_PX / span_s) + (left + SPARK_PX)
            ).astype(np.float32, copy=False)


def pad_rows(lengths: np.ndarray, x: np.ndarray, v: np.ndarray, band: np.ndarray, scale: object,
             bands: int, span_s: float) -> tuple[np.ndarray, np.ndarray]:
    """2-D float32 (x, y) of one ``Lines`` mark, a row per trace: trace ``i`` is ``lengths[i]``
    points of ``x``/``v`` after those before it, placed at ``band[i] + INSET + (1 - 2 * INSET)
    * clip(v / scale[i], 0, 1)`` (a scale that is no positive number reads as 1), padded by
    repeating its last point; an empty row is all NaN (it draws nothing)."""
    n = np.asarray(lengths, np.int64)
    width = max(2, int(n.max()) if len(n) else 0)
    if not n.any():
        x2 = np.full((max(1, len(n)), width), -span_s, dtype=np.float32)
        return x2, np.full_like(x2, np.nan)
    scale = np.asarray(scale, np.float64)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    base = (bands - 1 - np.asarray(band, np.float64)) + INSET
    # Cell (r, c) is point min(c, n[r] - 1) of row r (an empty row's is replaced below).
    at = (np.cumsum(n) - n)[:, None] + np.minimum(positions(width)[None, :], (n - 1)[:, None])
    x2 = np.asarray(x)[at].astype(np.float32)
    y2 = (base[:, None] + (1 - 2 * INSET) * np.clip(np.asarray(v, np.float64)[at] / scale[:, None], 0.0, 1.0)
          ).astype(np.float32)
    empty = n == 0
    x2[empty], y2[empty] = -span_s, np.nan
    return x2, y2


def _newest_apart(px: list[float], min_gap_px: float, edge_px: float = -np.inf) -> list[int]:
    """Indices of the time-ordered ``px`` kept newest first, each ``min_gap_px`` or more left of
    the one kept before and right of ``edge_px``; in time order."""
    keep: list[int] = []
    last_px = np.inf
    for i in range(len(px) - 1, -1, -1):
        if last_px - px[i] >= min_gap_px and px[i] >= edge_px:
            keep.append(i)
            last_px = px[i]
    return keep[::-1]


def rules(marks: list[tuple[float, str]], top: float, now: float, window_s: float,
          width_px: float = 76.0, min_gap_px: float = 3.0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Vertical rules (0 to ``top``) of the marks inside the window: (x, y, labels); of marks
    closer than ``min_gap_px`` the newest is kept (else frequent marks draw a grey bar)."""
    near = sorted(((t - now, label) for t, label in marks if now - window_s <= t <= now), key=lambda m: m[0])
    inside = [near[i] for i in _newest_apart([(dx + window_s) / window_s * width_px for dx, _ in near],
                                             min_gap_px)]
    if not inside:
        return np.zeros((1, 2), np.float32) - window_s, np.full((1, 2), np.nan, np.float32), []
    x = np.array([[dx, dx] for dx, _ in inside], dtype=np.float32)
    y = np.tile(np.array([0.0, top], dtype=np.float32), (len(inside), 1))
    return x, y, [label for _, label in inside]


def spaced_labels(xs: np.ndarray, labels: list[str], window_s: float, width_px: int,
                  min_gap_px: float) -> tuple[np.ndarray, list[str]]:
    """The labels (of time-ordered ``xs``) that fit without overlapping, newest first kept;
    labels end at their rule, so one closer than ``min_gap_px`` to the left edge goes too."""
    if not labels:
        return np.empty(0, np.float32), []
    keep = _newest_apart(((xs + window_s) / window_s * width_px).tolist(), min_gap_px, min_gap_px)
    return xs[keep], [labels[i] for i in keep]


def row_lines(col: Column, dev: Device) -> list[tuple[str, str]]:
    """(metric, colour) of each line ``dev``'s row draws under ``col``: the host row its host metric."""
    if dev.key == HOST_KEY:
        return [(col.host, HOST_COLOR)] if col.host else []
    return [(m, color) for m, color in zip(col.metrics, col.colors, strict=True)
            if dev.metrics is None or m in dev.metrics]


class PanelGrid:
    """The panel's rows: the figure (baselines, lines, mark rules and labels) and the HTML layer
    over it, with what only drawing keeps between refreshes (traces, buckets, cursor, texts)."""

    def __init__(self, columns: list[Column], rows: list[Device]) -> None:
        bands, ncols = max(1, len(rows)), max(1, len(columns))
        drawn = [(c, band, dev.key, m, color) for c, col in enumerate(columns)  # column after column
                 for band, dev in enumerate(rows) for m, color in row_lines(col, dev)]
        self.traces: list[Trace] = [t[1:] for t in drawn]
        self.trace_left_px = np.array([t[0] * COLUMN_PX for t in drawn], np.float32)
        self.order = [(key, metric) for _, key, metric, _ in self.traces]  # the store's pairs
        self.trace_bands = np.array([band for band, *_ in self.traces], np.int64)
        self.fixed_scales = [fixed_scale(metric) for _, metric in self.order]
        self.looked_up = [i for i, scale in enumerate(self.fixed_scales) if scale is None]
        self.sparks: SparkSet | None = None
        self.cursor: dict | None = None  # the store's cursor after the sparks' last read
        self.colored_for: tuple | None = None  # the lost GPUs the lines' colours were set for
        self.last_values: list[list[tuple[str, str, bool]]] = []  # each column's texts drawn last
        self.marks = MarkFollower()  # the marks in the window
        self.marks_window_s: float | None = None  # the window they were kept for
        self.had_rules = False
        self.label_key: tuple | None = None  # what the label column was drawn from, and its HTML
        self.labels_html = ""
        self.sent_px: tuple[np.ndarray, np.ndarray] | None = None  # the lines last sent, in pixels
        width_px = ncols * COLUMN_PX - text.GAP_PX
        sx = LinearScale(min=0.0, max=float(width_px))
        sy = LinearScale(min=0.0, max=top_of(bands))
        scales = {"x": sx, "y": sy}
        # Faint lines under each band of each column (the 0 of its scale).
        lefts = np.repeat(np.arange(ncols, dtype=np.float32) * COLUMN_PX, bands)
        base_y = np.tile(np.arange(bands, dtype=np.float32) + np.float32(INSET), ncols)
        self.base = Lines(x=np.stack([lefts, lefts + SPARK_PX], axis=1), y=np.stack([base_y, base_y], axis=1),
                          scales=scales, colors=[RULE_COLOR], opacities=[0.35], stroke_width=0.6)
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
        self.titles = [f'<div class="nbgpu-p nbgpu-m nbgpu-t" title="{_escape(col.help)}">'
                       f'{_escape(col.title) or "&nbsp;"}</div>' for col in columns]  # static
        self.tips = [col.help for col in columns]  # what a live value's row says on hover
        self.values = widgets.HTML(text.grid_html("", self.titles, [[] for _ in columns]),
                                   layout=widgets.Layout(margin="0", grid_area="cell"))
        self.box = widgets.GridBox([self.figure, self.values], layout=widgets.Layout(
            grid_template_areas='"cell"', grid_template_columns=f"{text.LABEL_PX + width_px}px", margin="0",
            flex="0 0 auto"))

    def colors(self, lost: object) -> list[str]:
        """Each trace's colour, grey for a lost GPU's (one colour where there is no trace)."""
        return [LOST_COLOR if key in lost else color for _, key, _, color in self.traces] \
            or [NO_TRACE_COLOR]


def moved(xy: tuple[np.ndarray, np.ndarray], sent: tuple | None) -> tuple | None:
    """``xy`` (the lines' x pixels, y rows) in whole pixels; None where ``sent`` drew the same."""
    px = (np.round(xy[0]), np.round(xy[1] * np.float32(text.ROW_PX)))
    same = sent is not None and all(np.array_equal(px[i], sent[i], equal_nan=True) for i in (0, 1))
    return None if same else px


class PanelDrawing:
    """The drawing half of ``GPUMonitor``: what one refresh computes and sends."""

    def _span(self, now: float) -> float:
        """Seconds shown: the window, or less while the sampler has not filled it, growing in steps
        of ``SPAN_GROWTH`` (each new span re-reads the whole window into new buckets)."""
        started = self.sampler.started_at
        if started is None or now - started >= self.window_s:
            return self.window_s
        steps = math.ceil(math.log(max(now - started, MIN_SPAN_S) / MIN_SPAN_S, SPAN_GROWTH) - 1e-9)
        return float(min(self.window_s, MIN_SPAN_S * SPAN_GROWTH ** steps))

    def _draw(self, alerts: list, now: float, lines: bool, status) -> None:
        s = self.sampler
        grid = self._grid
        span = self._span(now)
        if lines:
            self.drawn_span_s = span
        latest = {r["gpu"]: r for r in s.latest()}
        host = s.latest_host()
        bands = max(1, len(self._rows))
        lost = status.lost
        marks = self._window_marks(now)
        labels: list[str] = []
        if marks or grid.had_rules:  # else no rule to draw or clear
            rx, ry, labels = rules(marks, top_of(bands), now, span, SPARK_PX)
            lx, shown = spaced_labels(rx[:, 0], labels, span, SPARK_PX, MARK_LABEL_PX)
        live = status.state == "running"
        grid.last_values = [value_texts(col, self._rows, latest, host, live, lost) for col in self._columns]
        # The label column again only when what it shows changed (clocks, PCIe, badges, span).
        said = ([(r.get("sm_clock_mhz"), r.get("pcie_rx_bytes_per_s"), r.get("pcie_tx_bytes_per_s"))
                 for r in (latest.get(d.key, _NO_ROW) for d in self._rows)], host.get("host_ram_total_bytes"),
                [(a.gpu, a.severity, a.rule, a.message, a.suggestion) for a in alerts], dict(lost),
                self.drawn_span_s, self.window_s)
        if said != grid.label_key:
            grid.label_key = said
            grid.labels_html = text.label_html(self._rows, latest, host, alerts, lost,
                                               *span_words(self.drawn_span_s, self.window_s))
        xy = self._packed(now, span, max(3.0 * s.interval, 3.0), latest, host, bands) if lines else None
        px = None if xy is None else moved(xy, grid.sent_px)  # None: not a pixel moved
        # Every message goes out back to back, after the computing: a kernel's session sends
        # a message more cheaply right after another than after other work.
        below = "" if self._processes is None else self._processes.refresh(s, now, self._row_keys)
        grid.values.value = text.grid_html(grid.labels_html, grid.titles, grid.last_values, below, grid.tips)
        if px is not None:
            grid.sent_px = px
            with grid.lines.hold_sync():
                grid.lines.x, grid.lines.y = xy
        if xy is not None:
            if tuple(lost) != grid.colored_for:  # line colours follow lost GPUs only
                grid.colored_for = tuple(lost)
                grid.lines.colors = grid.colors(lost)  # an equal list sends nothing
            if labels or grid.had_rules:
                self._draw_rules(rx, ry, lx, shown, labels, span, bands)
        self._draw_header(status)

    def _points(self, now: float, span: float, gap_s: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(points per trace, x, values) of every trace, trace after trace, from the buckets
        kept between refreshes (new ones when the span or the traces change)."""
        grid = self._grid
        sset, since = grid.sparks, grid.cursor
        if sset is None or sset.width_s != span / BUCKETS or sset.traces != len(grid.order) or sset.ahead:
            sset, since = SparkSet(len(grid.order), span / BUCKETS), None
            grid.sparks = sset
        # Only the rows the store gained since the last refresh, late-drained ones too.
        store = self.sampler.store
        trace, t, v, grid.cursor = store.series_rows(grid.order, sset.start(now, span), since=since)
        first, last = sset.add_rows(trace, t, v, now, span)
        return sset.points(first, last, now, span, gap_s)

    def _window_marks(self, now: float) -> list[tuple[float, str]]:
        """(time, label) of the marks in the window; the store's events are read once each
        (``nbgpu.track()`` marks every iteration), all again for a longer window."""
        grid = self._grid
        if grid.marks_window_s != self.window_s:
            grid.marks, grid.marks_window_s = MarkFollower(), self.window_s
        marks = grid.marks.update(self.sampler.store)
        marks[:] = [m for m in marks if m[0] >= now - self.window_s]
        return [(t, label) for t, label, _ in marks]

    def _draw_rules(self, rx: np.ndarray, ry: np.ndarray, lx: np.ndarray, shown: list[str],
                    labels: list[str], span: float, bands: int) -> None:
        """The marks' rules in every column and the labels that fit (``shown``) over the first."""
        grid = self._grid
        lefts = np.arange(max(1, len(self._columns)), dtype=np.float32) * COLUMN_PX
        with grid.rules.hold_sync():
            grid.rules.x = to_px(np.tile(rx, (len(lefts), 1)), span, np.repeat(lefts, len(rx)))
            grid.rules.y = np.tile(ry, (len(lefts), 1))
        with grid.labels.hold_sync():
            if labels:
                grid.labels.x = to_px(lx, span, 0.0)
                grid.labels.y = np.full(len(shown), top_of(bands), np.float32)
                grid.labels.text = shown
            grid.labels.visible = bool(labels)
        grid.had_rules = bool(labels)

    def _packed(self, now: float, span: float, gap_s: float, latest: dict, host: dict,
                bands: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the one ``Lines`` mark: every trace at once, x in the figure's pixels."""
        n, x, v = self._points(now, span, gap_s)
        grid = self._grid
        scales = list(grid.fixed_scales)
        ends = np.cumsum(n)
        for i in grid.looked_up:  # the card's limits, or (last) the window's peak
            band, key, metric, _ = grid.traces[i]
            scales[i] = band_scale(metric, self._rows[band], latest.get(key, _NO_ROW), host,
                                   v[ends[i] - n[i]:ends[i]])
        x2, y2 = pad_rows(n, x, v, grid.trace_bands, scales, bands, span)
        return to_px(x2, span, grid.trace_left_px if len(n) else 0.0), y2

    def _draw_header(self, status=None) -> None:
        if self._closed or self._torn_down:
            return
        s = self.sampler
        status = s.status() if status is None else status
        if status.state != "running":
            state, color = "■ sampler stopped", "var(--jp-error-color1,#d32f2f)"
        elif not self.running:
            state, color = "■ panel stopped", "var(--jp-ui-font-color2,#777)"
        elif self._paused:
            state, color = "⏸ paused", "var(--jp-warn-color1,#e08600)"
        else:
            state, color = "● live", "var(--jp-success-color1,#2e7d32)"
        notes = []
        if status.source_kind == HostOnlySource.kind:
            notes.append(f"No GPU visible: {plain_reason(status.source_description)} Try "
                         "%gpumon --source sim for simulated GPUs.")
        if status.lost:
            notes.append(f"Lost GPU(s): {', '.join(str(k) for k in status.lost)}.")
        if status.xids:  # GPU faults NVML reported: the newest, and how many in all
            more = len(status.xids) - 1
            notes.append(f"⚠ {status.xids[-1].label}" + (f" (and {more} earlier)." if more else "."))
        if status.errors:
            per_gpu = ", ".join(f"GPU {k}: {n}" for k, n in status.errors_by_gpu.items() if n)
            notes.append(f"{status.errors} read(s) failed" + (f" ({per_gpu})" if per_gpu else "")
                         + f"; last: {status.last_error}")
        if self.last_error:
            notes.append(f"panel error: {self.last_error}")
        describe = f"{self._describe} · every\u00a0{s.interval:g}\u00a0s"  # never broken at a width
        if status.resolution_note:
            describe += f" · {status.resolution_note}"
        # An equal text sends nothing.
        self._header.value = text.header_html(describe, status.simulated, state, color, " ".join(notes))


class ProcessesLine:
    """The "who is using the GPU" line under the rows: this kernel, this user elsewhere, others
    (a total and a count, never names); recomputed at most every ``every_s``, "" with none."""

    every_s = 2.0

    def __init__(self) -> None:
        self.html = ""
        self._at = -float("inf")
        self._walked: frozenset[int] = frozenset()  # the PIDs listed at the last walk
        self._mine: set[int] = set()
        self._user = getpass.getuser()  # who_uses asks otherwise, every time (tens of us)

    def refresh(self, sampler, now: float, gpus: set | None = None) -> str:
        """``html`` for the GPUs shown (None: all)."""
        if now - self._at < self.every_s:
            return self.html
        self._at = now
        # The kernel's process tree (a costly walk) again only when NVML lists a PID not seen.
        listed = frozenset(p.pid for procs in sampler.processes().values() for p in procs)
        if not listed <= self._walked:
            self._mine, self._walked = tree_pids(), listed
        # One muted line per GPU: "GPU 0 · this kernel 4.0 GiB · others 12.0 GiB (3 processes)".
        rows = "".join(f"<div><b>GPU {_escape(str(gpu))}</b> · {_escape(users_line(u))}</div>"
                       for gpu, u in who_uses(sampler, mine=self._mine, user=self._user).items()
                       if gpus is None or gpu in gpus)
        self.html = f'<div class="nbgpu-m nbgpu-procs" title="GPU memory by process owner">{rows}</div>' \
            if rows else ""
        return self.html


def window_label(s: float, digits: int | None = None) -> str:
    """Seconds as the window menu says them: "30 s", "15 min", "1 h" (with ``digits``: "4.2 min")."""
    unit, name = (3600, "h") if s >= 3600 else (60, "min") if s >= 60 else (1, "s")
    return f"{s / unit:g} {name}" if digits is None else f"{s / unit:.{digits}f} {name}".replace(".0 ", " ")


def span_words(span_s: float | None, window_s: float) -> tuple[str, str]:
    """What the lines' width covers, and its tooltip: "last 4.2 min of 1 h" while the sampler
    has not yet filled the window, else "last 1 h"."""
    if span_s is None or span_s >= window_s:
        return f"last {window_label(window_s)}", "the sparklines' width: now is at their right end"
    return (f"last {window_label(span_s, 1 if span_s >= 60 else 0)} of {window_label(window_s)}",
            "the sparklines' width, until the sampler has recorded the whole window; "
            "now is at their right end")
