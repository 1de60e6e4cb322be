"""How a ``GPUMonitor`` refresh draws: sparklines, current values, marks' rules, the header.

Each refresh sends at most one message per widget: one ``Lines`` mark holds every column's
sparklines (x and y together) and one HTML widget every column's values (``grid_view``).
Min/max buckets of about 2 pixels are kept between refreshes (``spark.SparkSet``), so a
refresh reads only the rows the store gained since the one before.
"""

from __future__ import annotations

import math

import numpy as np

from ..metrics import HOST_KEY
from ..sources.base import Device
from ..store import MarkFollower
from . import text
from .bands import pack_packed, pad_rows, placing, rules, spaced_labels
from .columns import Column
from .grid_view import COLUMN_PX, SPARK_PX, moved, to_px, top_of
from .hostonly import HostOnlySource, plain_reason
from .readout import band_scale, label_rows, limit_scale, value_texts
from .spark import SparkSet

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
            key = dev.key
            if key == HOST_KEY:
                if col.host is not None:
                    out.append((band, key, col.host, HOST_COLOR))
                continue
            reported = dev.metrics
            for metric, color in zip(col.metrics, col.colors, strict=True):
                if reported is None or metric in reported:
                    out.append((band, key, metric, color))
        return out

    def _span(self, now: float) -> float:
        """Seconds shown: the window, or less while the sampler has not yet filled it.

        A fresh panel fills most of its width at once instead of drawing in the right edge
        only. Each new span means new buckets, a read of the whole window, so the span grows
        in steps of ``SPAN_GROWTH`` (the lines cover at least 1/``SPAN_GROWTH`` of the width),
        not every second: growing every second re-read the whole window at each refresh
        until it was full (for a 15 min window, 15 minutes of every GPU's rows each second).
        """
        started = self.sampler.started_at
        if started is None:
            return self.window_s
        elapsed = now - started
        if elapsed >= self.window_s:
            return self.window_s
        steps = math.ceil(math.log(max(elapsed, MIN_SPAN_S) / MIN_SPAN_S, SPAN_GROWTH) - 1e-9)
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
        gap_s = max(3.0 * s.interval, 3.0)
        lost = status.lost
        grid.last_values = []
        marks = self._window_marks(now)
        rx = ry = lx = None
        labels: list[str] = []
        shown: list[str] = []
        if marks or grid.had_rules:  # else no rule to draw or clear
            rx, ry, labels = rules(marks, top_of(bands), now, span, SPARK_PX)
            lx, shown = spaced_labels(rx[:, 0], labels, span, SPARK_PX, MARK_LABEL_PX)
        live = status.state == "running"
        for col in self._columns:
            grid.last_values.append(value_texts(col, self._rows, latest, host, live, lost))
        label_key = (_label_inputs(self._rows, latest, host, alerts, lost), self.drawn_span_s,
                     self.window_s)
        if label_key != grid.label_key:  # the clock and PCIe lines, badges, lost flags, span
            grid.label_key = label_key
            grid.labels_html = text.label_html(label_rows(self._rows, latest, host, alerts, lost),
                                               *span_words(self.drawn_span_s, self.window_s))
        xy = self._packed(now, span, gap_s, latest, host, bands) if lines else None
        px = None if xy is None else moved(xy, grid.sent_px)  # None: not a pixel moved
        # Every message of the refresh goes out back to back, after the computing: a kernel's
        # session sends a message more cheaply right after another than after other work.
        below = "" if self._processes is None else self._processes.refresh(s, now, self._row_keys)
        grid.values.value = text.grid_html(grid.labels_html, grid.titles, grid.last_values, below,
                                           grid.tips)
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
        """Line points of every trace of every column, from the buckets kept between refreshes:
        (points per trace, x, values) as flat runs, trace after trace.

        New buckets when the span (so the bucket width) or the traces change.
        """
        grid = self._grid
        order = grid.order
        width = span / BUCKETS
        sset = grid.sparks
        since = grid.cursor
        if sset is None or sset.width_s != width or sset.traces != len(order) or sset.ahead:
            sset, since = SparkSet(len(order), width), None
            grid.sparks = sset
        # Only the rows the store gained since the last refresh, late-drained ones too.
        trace, t, v, grid.cursor = self.sampler.store.series_rows(
            order, sset.start(now, span), since=since)
        first, last = sset.add_rows(trace, t, v, now, span)
        return sset.points(first, last, now, span, gap_s)

    def _window_marks(self, now: float) -> list[tuple[float, str]]:
        """(time, label) of the marks in the window, the store's new events read once each.

        ``nbgpu.track()`` marks every iteration and the store keeps 10,000 events: reading them
        all every refresh cost more than the rest of it. The grid keeps the window's marks;
        a longer window reads every event again, once.
        """
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
        """The marks' rules in every column and the labels that fit (``shown``) over the first;
        ``rules`` and ``spaced_labels`` give them in seconds before now."""
        grid = self._grid
        lefts = np.arange(max(1, len(self._columns)), dtype=np.float32) * COLUMN_PX
        x = to_px(np.tile(rx, (len(lefts), 1)), span, np.repeat(lefts, len(rx)))
        with grid.rules.hold_sync():
            grid.rules.x, grid.rules.y = x, np.tile(ry, (len(lefts), 1))
        with grid.labels.hold_sync():
            if labels:
                grid.labels.x = to_px(lx, span, 0.0)
                grid.labels.y = np.full(len(shown), top_of(bands), np.float32)
                grid.labels.text = shown
            grid.labels.visible = bool(labels)
        grid.had_rules = bool(labels)

    def _packed(self, now: float, span: float, gap_s: float, latest: dict, host: dict,
                bands: int) -> tuple[np.ndarray, np.ndarray]:
        """(x, y) of the one ``Lines`` mark: every trace packed at once, x in the figure's
        pixels (each column's traces right of the columns before it)."""
        n, x, v = self._points(now, span, gap_s)
        counts = n.tolist()
        grid = self._grid
        scales = list(grid.fixed_scales)
        rows, trace_keys, ends = self._rows, grid.trace_keys, None
        for i in grid.looked_up:  # the card's limits, or (last) the window's peak
            band, key, metric = trace_keys[i]
            row = latest.get(key, _NO_ROW)
            scale = limit_scale(metric, rows[band], row, host)
            if scale is None:
                ends = np.cumsum(n).tolist() if ends is None else ends
                scale = band_scale(metric, rows[band], row, host, v[ends[i] - counts[i]:ends[i]])
            scales[i] = scale
        if not len(n):  # no trace at all: the mark's one empty row
            x2, y2 = pack_packed(n, x, v, grid.trace_bands, np.empty(0), bands, span)
            return to_px(x2, span, 0.0), y2
        if n.any():
            x2, y2 = pad_rows(n, x, v, *self._placing(scales, bands), span)
        else:
            x2, y2 = pack_packed(n, x, v, grid.trace_bands, np.array(scales, np.float64), bands, span)
        return to_px(x2, span, grid.trace_left_px), y2

    def _placing(self, scales: list, bands: int) -> tuple[np.ndarray, np.ndarray]:
        """Each trace's band base and usable scale (``pack_packed``'s), kept while the scales
        and the number of bands stay: most refreshes draw on the same limits."""
        grid = self._grid
        kept = grid.scaled
        if kept is None or kept[1] != bands or kept[0] != scales:
            kept = grid.scaled = (scales, bands, *placing(grid.trace_bands, scales, bands))
        return kept[2], kept[3]

    def _draw_header(self, status=None) -> None:
        s = self.sampler
        if self._closed or self._torn_down:
            return
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
        said = (self._describe, s.interval, status.resolution_note, status.simulated, state, color,
                tuple(notes))
        kept = self._header_said
        if kept is not None and kept[0] == said and self._header.value is kept[1]:
            return  # the header reads as it did (most refreshes), and nothing else changed it
        describe = f"{self._describe} · every\u00a0{s.interval:g}\u00a0s"  # never broken at a width
        if status.resolution_note:
            describe += f" · {status.resolution_note}"
        value = text.header_html(describe, status.simulated, state, color, " ".join(notes))
        self._header.value = value  # an equal text sends nothing
        self._header_said = (said, self._header.value)


def _label_inputs(rows: list[Device], latest: dict, host: dict, alerts: list, lost: dict) -> tuple:
    """Everything ``label_rows`` reads that can change while a panel runs (NaN is one object)."""
    per_gpu = tuple((r.get("sm_clock_mhz"), r.get("pcie_rx_bytes_per_s"), r.get("pcie_tx_bytes_per_s"))
                    for r in (latest.get(d.key, _NO_ROW) for d in rows if d.key != HOST_KEY))
    badges = tuple((a.gpu, a.severity, a.rule, a.message, a.suggestion) for a in alerts)
    return per_gpu, host.get("host_ram_total_bytes"), badges, tuple(lost.items())


def window_label(s: float) -> str:
    """Seconds as the window menu says them: "30 s", "15 min", "1 h"."""
    return f"{s / 3600:g} h" if s >= 3600 else (f"{s / 60:g} min" if s >= 60 else f"{s:g} s")


def span_words(span_s: float | None, window_s: float) -> tuple[str, str]:
    """What the lines' width covers, in words, and its tooltip: "last 4.2 min of 1 h" while
    the sampler has not yet filled the window, else "last 1 h"."""
    if span_s is None or span_s >= window_s:
        return f"last {window_label(window_s)}", "the sparklines' width: now is at their right end"
    shown = (f"{span_s / 3600:.1f} h" if span_s >= 3600 else
             f"{span_s / 60:.1f} min" if span_s >= 60 else f"{span_s:.0f} s")
    return (f"last {shown.replace('.0 ', ' ')} of {window_label(window_s)}",
            "the sparklines' width, until the sampler has recorded the whole window; "
            "now is at their right end")
