"""Pack many sparklines into one bqplot ``Lines`` mark: one horizontal band per panel row.

Row ``r`` of ``n`` occupies y in ``[n - 1 - r, n - r]``; a value is drawn at
``band + INSET + (1 - 2 * INSET) * clip(value / scale, 0, 1)``, so each row keeps a fixed
scale (0–100 % for percentages) and rows never overlap. x is seconds before ``now``
(negative); the panel turns it into its figure's pixels (``grid_view.to_px``).
"""

from __future__ import annotations

import numpy as np

from ..decimate import positions

INSET = 0.12  # fraction of a band left empty above and below the line


def pack_points(traces: list[tuple[int, np.ndarray, np.ndarray, float]], bands: int,
                span_s: float) -> tuple[np.ndarray, np.ndarray]:
    """2-D float32 ``(x, y)`` arrays, one row per trace ``(band, x, values, scale)``.

    ``x`` is seconds before now; each value is placed in its band on the band's fixed
    scale. Rows are padded to equal length by repeating their last point (an empty row is
    all NaN, which draws nothing).
    """
    n = np.fromiter((len(x) for _, x, _, _ in traces), np.int64, len(traces))
    x = np.concatenate([x for _, x, _, _ in traces]) if traces else np.empty(0)
    v = np.concatenate([np.asarray(v, dtype=np.float64) for _, _, v, _ in traces]) if traces else np.empty(0)
    band = np.fromiter((b for b, _, _, _ in traces), np.int64, len(traces))
    scale = np.fromiter((s for _, _, _, s in traces), np.float64, len(traces))
    return pack_packed(n, x, v, band, scale, bands, span_s)


def pack_packed(lengths: np.ndarray, x: np.ndarray, v: np.ndarray, band: np.ndarray,
                scale: np.ndarray, bands: int, span_s: float) -> tuple[np.ndarray, np.ndarray]:
    """``pack_points`` of flat runs: trace ``i`` is ``lengths[i]`` points of ``x``/``v`` after
    those of the traces before it, drawn in band ``band[i]`` on scale ``scale[i]``
    (a scale that is not a positive number reads as 1)."""
    n = np.asarray(lengths, np.int64)
    width = max(2, int(n.max()) if len(n) else 0)
    if not len(n) or not n.any():
        x2 = np.full((max(1, len(n)), width), -span_s, dtype=np.float32)
        return x2, np.full_like(x2, np.nan)
    return pad_rows(n, x, v, *placing(band, scale, bands), span_s)


def placing(band: np.ndarray, scale: object, bands: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's base (the bottom of its band plus the inset) and its scale, a scale that is
    not a positive number read as 1: what ``pad_rows`` places values with."""
    scale = np.asarray(scale, np.float64)
    scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)
    return (bands - 1 - np.asarray(band, np.float64)) + INSET, scale


def pad_rows(lengths: np.ndarray, x: np.ndarray, v: np.ndarray, base: np.ndarray,
             scale: np.ndarray, span_s: float) -> tuple[np.ndarray, np.ndarray]:
    """``pack_packed`` once each row's ``base`` and its (positive, finite) ``scale`` are known.

    Cell (r, c) is point min(c, n[r] - 1) of row r: its points, then its last one repeated.
    Cells are placed in their band after they are gathered, with their row's base and scale:
    the values placing each point first and padding then gives, without a per-point gather
    of bases and scales.
    """
    n = lengths
    width = max(2, int(n.max()))
    starts = np.cumsum(n) - n
    # An empty row points at the point before its start (the last one for a first row):
    # any point does, since the row is replaced below.
    at = starts[:, None] + np.minimum(positions(width)[None, :], (n - 1)[:, None])
    x2 = np.asarray(x)[at].astype(np.float32)
    y2 = (base[:, None] + (1 - 2 * INSET) * np.clip(np.asarray(v, np.float64)[at] / scale[:, None], 0.0, 1.0)
          ).astype(np.float32)
    if not n.all():
        empty = n == 0
        x2[empty], y2[empty] = -span_s, np.nan
    return x2, y2


def rules(marks: list[tuple[float, str]], top: float, now: float, window_s: float,
          width_px: float = 76.0, min_gap_px: float = 3.0) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Vertical rules (0 to ``top``) of the marks inside the window: (x, y, labels).

    Of marks closer than ``min_gap_px`` on a ``width_px`` line the newest is kept: marks
    every few seconds in a long window would otherwise draw a grey bar.
    """
    near = sorted(((t - now, label) for t, label in marks if now - window_s <= t <= now),
                  key=lambda m: m[0])  # (in time order already, mostly: a linear sort)
    inside = []
    last_px = np.inf
    for dx, label in reversed(near):
        px = (dx + window_s) / window_s * width_px
        if last_px - px >= min_gap_px:
            inside.append((dx, label))
            last_px = px
    inside.reverse()
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
