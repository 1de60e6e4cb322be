"""Pack many sparklines into one bqplot ``Lines`` mark: one horizontal band per panel row.

Row ``r`` of ``n`` occupies y in ``[n - 1 - r, n - r]``; a value is drawn at
``band + INSET + (1 - 2 * INSET) * clip(value / scale, 0, 1)``, so each row keeps a fixed
scale (0–100 % for percentages) and rows never overlap. x is seconds before ``now``
(negative), so the x scale never changes while time moves.
"""

from __future__ import annotations

import numpy as np

INSET = 0.12  # fraction of a band left empty above and below the line


def pack_points(traces: list[tuple[int, np.ndarray, np.ndarray, float]], bands: int,
                span_s: float) -> tuple[np.ndarray, np.ndarray]:
    """2-D float32 ``(x, y)`` arrays, one row per trace ``(band, x, values, scale)``.

    ``x`` is seconds before now; each value is placed in its band on the band's fixed
    scale. Rows are padded to equal length by repeating their last point (an empty row is
    all NaN, which draws nothing).
    """
    width = max([2] + [len(x) for _, x, _, _ in traces])
    x2 = np.full((max(1, len(traces)), width), -span_s, dtype=np.float32)
    y2 = np.full_like(x2, np.nan)
    for i, (band, x, v, scale) in enumerate(traces):
        n = len(x)
        if n == 0:
            continue
        scale = scale if scale and np.isfinite(scale) and scale > 0 else 1.0
        y = (bands - 1 - band) + INSET + (1 - 2 * INSET) * np.clip(v / scale, 0.0, 1.0)
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
