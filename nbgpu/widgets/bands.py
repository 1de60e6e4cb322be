"""Pack many sparklines into one bqplot ``Lines`` mark: one horizontal band per panel row.

Row ``r`` of ``n`` occupies y in ``[n - 1 - r, n - r]``; a value is drawn at
``band + INSET + (1 - 2 * INSET) * clip(value / scale, 0, 1)``, so each row keeps a fixed
scale (0–100 % for percentages) and rows never overlap. x is seconds before ``now``
(negative), so the x scale never changes while time moves.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..decimate import decimate_minmax

INSET = 0.12  # fraction of a band left empty above and below the line


@dataclass
class Trace:
    """One line to draw: its band (row), times, values and the value at the top of the band."""

    band: int
    times: np.ndarray
    values: np.ndarray
    scale: float


def with_gaps(t: np.ndarray, v: np.ndarray, gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Insert a NaN wherever samples are more than ``gap_s`` apart, so missing data shows."""
    if len(t) < 2:
        return t, v
    jumps = np.flatnonzero(np.diff(t) > gap_s)
    if not len(jumps):
        return t, v
    return np.insert(t, jumps + 1, t[jumps] + gap_s / 2), np.insert(v, jumps + 1, np.nan)


def pack(traces: list[Trace], bands: int, now: float, window_s: float, buckets: int,
         gap_s: float) -> tuple[np.ndarray, np.ndarray]:
    """2-D float32 ``(x, y)`` arrays, one row per trace, decimated to about 2 points a bucket.

    Rows are padded to equal length by repeating their last point (an empty row is all
    NaN, which draws nothing).
    """
    rows_x, rows_y = [], []
    for tr in traces:
        t, v = tr.times, tr.values
        if len(t):
            keep = t >= now - window_s
            t, v = t[keep], v[keep]
        t, v = decimate_minmax(t, v, buckets)
        t, v = with_gaps(t, v, gap_s)
        scale = tr.scale if tr.scale and np.isfinite(tr.scale) and tr.scale > 0 else 1.0
        base = bands - 1 - tr.band
        y = base + INSET + (1 - 2 * INSET) * np.clip(v / scale, 0.0, 1.0)
        rows_x.append(t - now)
        rows_y.append(y)
    width = max([2] + [len(x) for x in rows_x])
    x2 = np.full((max(1, len(traces)), width), np.nan, dtype=np.float32)
    y2 = np.full_like(x2, np.nan)
    x2[:, :] = -window_s
    for i, (x, y) in enumerate(zip(rows_x, rows_y, strict=True)):
        n = len(x)
        if n == 0:
            continue
        x2[i, :n], y2[i, :n] = x, y
        x2[i, n:], y2[i, n:] = x[-1], y[-1]
    return x2, y2


def baselines(bands: int, window_s: float) -> tuple[np.ndarray, np.ndarray]:
    """Faint lines under each band (the 0 of its scale), as 2-D arrays for a Lines mark."""
    x = np.tile(np.array([-window_s, 0.0], dtype=np.float32), (max(1, bands), 1))
    y = np.array([[b + INSET] * 2 for b in range(max(1, bands))], dtype=np.float32)
    return x, y


def rules(marks: list[tuple[float, str]], top: float, now: float, window_s: float
          ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Vertical rules (0 to ``top``) of the marks inside the window: (x, y, labels)."""
    inside = [(t - now, label) for t, label in marks if now - window_s <= t <= now]
    if not inside:
        return np.zeros((1, 2), np.float32) - window_s, np.full((1, 2), np.nan, np.float32), []
    x = np.array([[dx, dx] for dx, _ in inside], dtype=np.float32)
    y = np.tile(np.array([0.0, top], dtype=np.float32), (len(inside), 1))
    return x, y, [label for _, label in inside]


def spaced_labels(xs: np.ndarray, labels: list[str], window_s: float, width_px: int,
                  min_gap_px: float) -> tuple[np.ndarray, list[str]]:
    """The labels that fit without overlapping, newest first kept: (x, labels) in time order.

    Labels end at their rule, so one closer than ``min_gap_px`` to the left edge is dropped
    too (it would be cut off).
    """
    if not labels:
        return np.empty(0, np.float32), []
    keep: list[int] = []
    last_px = np.inf
    for i in np.argsort(-xs, kind="stable"):
        px = (xs[i] + window_s) / window_s * width_px
        if last_px - px >= min_gap_px and px >= min_gap_px:
            keep.append(int(i))
            last_px = px
    keep.sort()
    return xs[keep], [labels[i] for i in keep]
