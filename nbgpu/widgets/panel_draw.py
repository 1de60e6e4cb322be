"""How a ``GPUMonitor`` refresh draws: sparklines, current values, marks' rules, the header.

Each refresh sends at most one message per widget (``grid_view``) and reads only the rows
the store gained since the one before (``spark.SparkSet``).
"""

from __future__ import annotations

import math

import numpy as np

from ..metrics import HOST_KEY
from ..store import MarkFollower
from . import text
from .columns import Column
from .grid_view import COLUMN_PX, SPARK_PX, moved, pad_rows, rules, spaced_labels, to_px, top_of
from .hostonly import HostOnlySource, plain_reason
from .spark import SparkSet
from .text import band_scale, label_rows, value_texts

MARK_LABEL_PX = 40  # closer mark labels are dropped (the older one), the rules stay
BUCKETS = SPARK_PX // 2  # min and max of each 2-pixel slice: about one point per pixel
_NO_ROW: dict = {}  # a GPU with no readings yet
HOST_COLOR = "#0d9488"
MIN_SPAN_S = 10.0  # a fresh sampler's panel shows at least this many seconds
SPAN_GROWTH = 1.5  # and then spans this much longer each time its history outgrows one


class PanelDrawing:
    """The drawing half of ``GPUMonitor``: what one refresh computes and sends."""

    def _traces(self, col: Column) -> list[tuple[int, object, str, str]]:
        out = []
        for band, dev in enumerate(self._rows):
            if dev.key == HOST_KEY:
                if col.host is not None:
                    out.append((band, dev.key, col.host, HOST_COLOR))
                continue
            out += [(band, dev.key, m, color) for m, color in zip(col.metrics, col.colors, strict=True)
                    if dev.metrics is None or m in dev.metrics]
        return out

    def _span(self, now: float) -> float:
        """Seconds shown: the window, or less while the sampler has not yet filled it (a fresh
        panel fills its width). It grows in steps of ``SPAN_GROWTH``, not every second: each
        new span re-reads the whole window into new buckets."""
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
        said = label_rows(self._rows, latest, host, alerts, lost)
        if (said, self.drawn_span_s, self.window_s) != grid.label_key:  # clock, PCIe, badges, lost, span
            grid.label_key = (said, self.drawn_span_s, self.window_s)
            grid.labels_html = text.label_html(said, *span_words(self.drawn_span_s, self.window_s))
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
        start = now - self.window_s
        if any(t < start for t, _, _ in marks):
            marks[:] = [m for m in marks if m[0] >= start]
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
            band, key, metric = grid.trace_keys[i]
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


def window_label(s: float) -> str:
    """Seconds as the window menu says them: "30 s", "15 min", "1 h"."""
    return f"{s / 3600:g} h" if s >= 3600 else (f"{s / 60:g} min" if s >= 60 else f"{s:g} s")


def span_words(span_s: float | None, window_s: float) -> tuple[str, str]:
    """What the lines' width covers, and its tooltip: "last 4.2 min of 1 h" while the sampler
    has not yet filled the window, else "last 1 h"."""
    if span_s is None or span_s >= window_s:
        return f"last {window_label(window_s)}", "the sparklines' width: now is at their right end"
    shown = f"{span_s / 3600:.1f} h" if span_s >= 3600 else \
        f"{span_s / 60:.1f} min" if span_s >= 60 else f"{span_s:.0f} s"
    return (f"last {shown.replace('.0 ', ' ')} of {window_label(window_s)}",
            "the sparklines' width, until the sampler has recorded the whole window; "
            "now is at their right end")
