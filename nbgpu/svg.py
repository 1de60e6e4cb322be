"""A static SVG picture of a timeline DataFrame: the fallback that saved notebooks keep."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

import numpy as np

from .decimate import decimate_minmax
from .metrics import BY_NAME
from .timeline import epoch_seconds
from .units import BINARY

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_METRICS = ("util_pct", "mem_used_bytes", "power_w", "temp_c", "sm_active_pct")
COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")
PANEL_H, GAP_H, LEFT, RIGHT, TOP, BOTTOM = 90, 26, 64, 16, 30, 30  # layout, in pixels
FONT = "font-family:sans-serif;font-size:11px"
CHAR_W, LABEL_ROW_H = 6.8, 14  # a generous width of one character at FONT's size; a row of mark labels


def _scale_for(metric: str, vmax: float) -> tuple[float, str]:
    """Divisor and unit text that make the values of ``metric`` readable (binary, as nvidia-smi)."""
    unit = BY_NAME[metric].unit if metric in BY_NAME else ""
    if unit in ("B", "B/s"):
        return next(((size, name[:-1] + unit) for size, name in BINARY if vmax >= size), (1.0, unit))
    return (1e3, "kJ") if unit == "J" and vmax >= 1e4 else (1.0, unit)


def _fmt(v: float) -> str:
    text = f"{v:.{0 if abs(v) >= 100 else 1 if abs(v) >= 10 else 2}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _tick_seconds(s: float) -> str:
    """An elapsed-time tick label: ``0.5s``, ``90s``, ``2.5m``, ``1.5h``."""
    return f"{s / 3600:.1f}h" if s >= 3600 else f"{s / 60:.1f}m" if s >= 120 else f"{s:.3g}s"


def _path(xs: np.ndarray, ys: np.ndarray) -> str:
    """SVG path data; NaN starts a new sub-path, so gaps stay gaps."""
    ok = ~np.isnan(ys)
    pen = np.r_[False, ok[:-1]].tolist()  # down after a point, up after a gap
    return "".join(f"{'L' if p else 'M'}{x:.1f},{y:.1f}"
                   for p, x, y, k in zip(pen, xs.tolist(), ys.tolist(), ok.tolist(), strict=True) if k)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if not span > 0 or not math.isfinite(span):  # nothing to divide, or past the float range
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def svg_timeline(df: pd.DataFrame, metrics: list[str] | None = None,
                 marks: list[tuple[float, str]] | None = None, width: int = 720) -> str:
    """Draw ``df`` (as from ``Timeline.to_pandas()``) as a standalone SVG document string: one chart
    per metric of ``metrics`` (None: ``DEFAULT_METRICS``), ``marks`` as dashed rules."""
    wanted = [m for m in (DEFAULT_METRICS if metrics is None else metrics) if m in df.columns]
    per = series_of_frame(df, wanted)
    return svg_series({m: {g: per[g][m] for g in per} for m in wanted}, marks, width, list(per))


def series_of_frame(df: pd.DataFrame, metrics: tuple | list) -> dict[object, dict[str, tuple]]:
    """{gpu: {metric: (epoch seconds, values)}} of ``df``, NaN dropped."""
    t, gpus = epoch_seconds(df["time"]), df["gpu"].to_numpy()
    cols = {m: df[m].to_numpy(dtype=np.float64, na_value=np.nan) for m in metrics if m in df.columns}
    out = {}
    for g in dict.fromkeys(gpus.tolist()):
        rows = gpus == g
        out[g] = {m: (t[ok], v[ok]) for m, v in cols.items() for ok in (rows & ~np.isnan(v),)}
    return out


def label_rows(xs: list[float], texts: list[str], width: int) -> list[tuple[float, str, int]]:
    """(x, anchor, row) for mark labels at ``xs``: each in the first row where it overlaps none
    before it; near the right edge a label ends at its rule instead of starting there."""
    placed: list[tuple[float, float, int]] = []
    out = []
    for x, text in zip(xs, texts, strict=True):
        w = CHAR_W * len(text) + 4
        start = x + 2 if x + 2 + w <= width else x - 2 - w
        row = 0
        while any(r == row and start < e and s < start + w for s, e, r in placed):
            row += 1
        placed.append((start, start + w, row))
        out.append((start if start > x else x - 2, "start" if start > x else "end", row))
    return out


def svg_series(data: dict[str, dict[object, tuple[np.ndarray, np.ndarray]]],
               marks: list[tuple[float, str]] | None = None, width: int = 720,
               gpus: list = (), dashed: frozenset | set = frozenset()) -> str:
    """Draw ``{metric: {gpu: (epoch seconds, values)}}`` as a standalone SVG document string, a line
    per GPU of ``gpus`` (``dashed``: those drawn dashed)."""
    width = max(240, int(width))
    plot_w = width - LEFT - RIGHT
    data = {m: {g: _drawable(t, v) for g, (t, v) in per.items()} for m, per in data.items()}
    data = {m: per for m, per in data.items() if any(len(t) for t, _ in per.values())}
    if not data:
        return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="40" '
                f'viewBox="0 0 {width} 40"><text x="8" y="24" style="{FONT}">'
                "no GPU samples in this range</text></svg>")
    mark_list = [(float(mt), str(label)) for mt, label in (marks or [])]
    ends = [float(f(t)) for per in data.values() for t, _ in per.values() if len(t) for f in (np.min, np.max)]
    t0, t1 = min(ends + [mt for mt, _ in mark_list]), max(ends + [mt for mt, _ in mark_list])
    span = max(t1 - t0, 1e-6)
    metrics = list(data)

    def x_of(tt: np.ndarray | float):
        return LEFT + (np.asarray(tt) - t0) / span * plot_w

    mark_list.sort()
    placed = label_rows([float(x_of(mt)) for mt, _ in mark_list], [lb for _, lb in mark_list], width)
    rows = max((r for *_, r in placed), default=-1) + 1
    top0 = TOP + (LABEL_ROW_H * rows + 4 if rows else 0)
    height = top0 + len(metrics) * (PANEL_H + GAP_H) - GAP_H + BOTTOM

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}">',
           "<title>nbgpu timeline</title>",
           f'<rect width="{width}" height="{height}" fill="white"/>']
    x = LEFT
    for i, gpu in enumerate(gpus):
        color = COLORS[i % len(COLORS)]
        name = "all" if gpu is None else f"GPU {gpu}"
        dash = ' stroke-dasharray="4,2"' if gpu in dashed else ""
        out.append(f'<line x1="{x}" x2="{x + 12}" y1="10" y2="10" stroke="{color}" stroke-width="3"{dash}/>'
                   f'<text x="{x + 16}" y="14" style="{FONT}">{escape(name)}</text>')
        x += 24 + CHAR_W * len(name)
    for (lx, anchor, row), (_, mlabel) in zip(placed, mark_list, strict=True):
        out.append(f'<text x="{lx:.1f}" y="{TOP - 2 + LABEL_ROW_H * row}" text-anchor="{anchor}" '
                   f'style="{FONT};fill:#333">{escape(mlabel)}</text>')
    out.append(f'<text x="{width - RIGHT}" y="14" text-anchor="end" style="{FONT}">'
               f"{escape(_tick_seconds(span))}</text>")
    for p, metric in enumerate(metrics):
        top = top0 + p * (PANEL_H + GAP_H)
        bottom = top + PANEL_H
        values = np.concatenate([v for _, v in data[metric].values()])
        vmin, vmax = float(np.min(values)), float(np.max(values))
        percent = metric in BY_NAME and BY_NAME[metric].percent
        lo = 0.0 if (percent or vmin >= 0) else vmin
        hi = max(100.0, vmax) if percent else 1.05 * (vmax if vmax > lo else lo + 1.0)
        div, unit = _scale_for(metric, hi)
        label = BY_NAME[metric].label if metric in BY_NAME else metric
        out.append(f'<text x="{LEFT}" y="{top - 4}" style="{FONT};font-weight:bold">'
                   f"{escape(label)}{' (' + escape(unit) + ')' if unit else ''}</text>")
        out.append(f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL_H}" '
                   'fill="none" stroke="#ccc"/>')
        for tick in _nice_ticks(lo / div, hi / div, 3):
            y = bottom - (tick * div - lo) / (hi - lo) * PANEL_H
            out.append(f'<line x1="{LEFT}" x2="{LEFT + plot_w}" y1="{y:.1f}" y2="{y:.1f}" '
                       'stroke="#eee"/>'
                       f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end" style="{FONT}">'
                       f"{_fmt(tick)}</text>")
        for i, gpu in enumerate(gpus):
            tt, vv = data[metric].get(gpu, ((), ()))
            if not len(tt):
                continue
            tt, vv = decimate_minmax(tt, vv, max(16, plot_w // 2))
            ys = bottom - (vv - lo) / (hi - lo) * PANEL_H
            xs = x_of(tt)
            gaps = _gap_breaks(tt)
            xs, ys = np.insert(xs, gaps, np.nan), np.insert(ys, gaps, np.nan)
            color = COLORS[i % len(COLORS)]
            if len(tt) == 1:
                out.append(f'<circle cx="{xs[0]:.1f}" cy="{ys[0]:.1f}" r="2" fill="{color}"/>')
            else:
                style = ('stroke-width="1.3" stroke-dasharray="5,3"' if gpu in dashed
                         else f'stroke-width="{2.4 if dashed else 1.3}"')
                out.append(f'<path d="{_path(xs, ys)}" fill="none" stroke="{color}" {style}/>')
        for mt, _ in mark_list:
            mx = float(x_of(mt))
            out.append(f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{top}" y2="{bottom}" '
                       'stroke="#555" stroke-dasharray="3,3"/>')
    base = top0 + len(metrics) * (PANEL_H + GAP_H) - GAP_H
    for tick in _nice_ticks(0.0, span, 6):
        tx = float(x_of(t0 + tick))
        out.append(f'<text x="{tx:.1f}" y="{base + 16}" text-anchor="middle" style="{FONT}">'
                   f"{escape(_tick_seconds(tick) if tick else '0')}</text>")
    out.append("</svg>")
    return "".join(out)


def _drawable(t: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The points a chart scale can hold: NaN, infinite and beyond 1e300 left out."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = np.abs(v) <= 1e300
    return np.asarray(t, dtype=np.float64)[ok], v[ok]


def _gap_breaks(t: np.ndarray) -> np.ndarray:
    """Where a pause much longer than the usual spacing follows a point: the indices after it."""
    if len(t) < 3:
        return np.empty(0, dtype=int)
    dt = np.diff(t)
    return np.flatnonzero(dt > max(10 * float(np.median(dt)), 5.0)) + 1
