"""Text of the panel: current values and the HTML of labels, values and the header.

Colours come from JupyterLab's CSS variables (with fallbacks for other front ends), so
the panel reads in light and dark themes alike. Nothing here touches a widget.
"""

from __future__ import annotations

import html
import math

from ..metrics import HOST_KEY
from ..sources.base import Device
from ..units import MISSING, fmt_bytes, fmt_celsius, fmt_rate
from ..units import fmt_used_of as used_of
from .columns import Column

ROW_PX = 30
STRIP_PX = 12  # strip above the rows where mark labels go
TITLE_PX = 16  # a column's title line, above the strip
SPARK_PX = 76  # a column's sparklines
VALUE_PX = 72  # a column's values, right of its sparklines
GAP_PX = 4  # between columns
LABEL_PX = 150  # the rows' labels, left of the columns
COLUMN_PX = SPARK_PX + VALUE_PX + GAP_PX
SEVERITY_COLORS = {"critical": "var(--jp-error-color1,#d32f2f)",
                   "warning": "var(--jp-warn-color1,#e08600)",
                   "info": "var(--jp-info-color1,#0288d1)"}
# Sent once per panel; the HTML sent on every refresh only names these classes.
STYLE = f"""<style>
.nbgpu-p{{font-family:var(--jp-ui-font-family,system-ui,sans-serif);
font-size:var(--jp-ui-font-size1,12px);color:var(--jp-ui-font-color1,#222);line-height:1.15}}
.nbgpu-r{{height:{ROW_PX}px;display:flex;flex-direction:column;justify-content:center;
overflow:hidden;white-space:nowrap}}
.nbgpu-r>div{{overflow:hidden;text-overflow:ellipsis}}
.nbgpu-m{{color:var(--jp-ui-font-color2,#777)}}
.nbgpu-n{{font-variant-numeric:tabular-nums}}
.nbgpu-v{{text-align:right;padding-right:4px;font-size:var(--jp-ui-font-size0,11px)}}
.nbgpu-d{{font-size:10px}}
.nbgpu-h{{display:block;font-size:9px;line-height:1;color:var(--jp-ui-font-color2,#777)}}
.nbgpu-b{{color:#fff;border-radius:3px;padding:0 4px;margin-left:4px;font-size:10px;font-weight:600}}
.nbgpu-t{{font-size:11px;white-space:nowrap;height:{TITLE_PX - 2}px;margin-bottom:2px;
overflow:hidden;text-overflow:ellipsis}}
.nbgpu-g{{display:flex}}
.nbgpu-l{{flex:0 0 auto;width:{LABEL_PX}px;box-sizing:border-box}}
.nbgpu-c{{flex:0 0 auto;width:{SPARK_PX + VALUE_PX}px;margin-right:{GAP_PX}px}}
.nbgpu-w{{margin-left:{SPARK_PX}px;width:{VALUE_PX}px;padding-top:{STRIP_PX}px}}
.nbgpu-spark{{pointer-events:none}}
.nbgpu-procs{{margin-top:4px;white-space:normal;font-size:11px;line-height:1.4}}
</style>"""


_escaped: dict[str, str] = {}  # the same texts (tooltips, "stale", titles) come every refresh
MAX_ESCAPED = 4096


def _escape(text: str) -> str:
    """``html.escape`` of ``text``, remembered: a refresh escapes about a hundred texts."""
    out = _escaped.get(text)
    if out is None:
        if len(_escaped) >= MAX_ESCAPED:
            _escaped.clear()
        out = _escaped[text] = html.escape(text)
    return out


def _ok(v: object) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v)


def pct(v: object) -> str:
    return f"{v:.0f} %" if _ok(v) else MISSING


def rate(v: object) -> str:
    """Bytes a second in binary units: "1.2 GiB/s", "340.0 MiB/s"."""
    return fmt_rate(v) if _ok(v) else MISSING


def gpu_value(col: Column, row: dict, info: Device) -> str:
    """Current value of ``col`` for a GPU from its latest readings (``Sampler.latest()`` row)."""
    metrics = col.metrics
    v0 = row.get(metrics[0], math.nan)
    if len(metrics) == 1:
        if not _ok(v0):
            return "–"
        vals = (v0,)
    else:
        vals = [v0] + [row.get(m, math.nan) for m in metrics[1:]]
        if not any(_ok(v) for v in vals):
            return "–"
    k = col.key
    if k == "mem":
        return used_of(v0, row.get("mem_total_bytes", info.mem_total_bytes))
    if k == "power":
        limit = row.get("power_limit_w", info.power_limit_w)
        return f"{v0:.0f}/{limit:.0f} W" if _ok(limit) and _ok(v0) else \
            (f"{v0:.0f} W" if _ok(v0) else "–")
    if k == "temp":
        return fmt_celsius(v0)
    if k == "clocks":
        return f"{v0:.0f} MHz"
    if k == "pcie":
        return f"↓{rate(v0)} ↑{rate(vals[1])}"
    if col.percent and len(vals) == 2:
        return " · ".join(f"{v:.0f}" if _ok(v) else "–" for v in vals) + " %"
    return pct(v0)


def host_value(col: Column, host: dict) -> str:
    """Current value of the host row under ``col`` ("" where the column has no host metric)."""
    if col.host is None:
        return ""
    v = host.get(col.host, math.nan)
    if col.host == "host_ram_used_bytes":
        value = used_of(v, host.get("host_ram_total_bytes"))
    elif col.host == "proc_rss_bytes":
        value = fmt_bytes(v)
    else:
        value = pct(v)
    return f"{HOST_LABELS.get(col.host, '')}\n{value}"


# The host row's values sit in the GPU columns, so each carries its own small label
# (``_value_row`` draws the line before a newline as one).
HOST_LABELS = {"host_cpu_pct": "host CPU", "host_ram_used_bytes": "RAM",
               "proc_cpu_pct": "kernel CPU", "proc_rss_bytes": "kernel RSS"}


HOST_TOOLTIPS = {"host_cpu_pct": "CPU of the whole machine",
                 "host_ram_used_bytes": "RAM in use on the machine",
                 "proc_cpu_pct": "CPU of this kernel and its child processes (% of one core)",
                 "proc_rss_bytes": "RAM of this kernel and its child processes"}


def host_tooltip(col: Column) -> str:
    """What the host row under ``col`` shows, in words ("" where the column has no host metric)."""
    return HOST_TOOLTIPS.get(col.host or "", "")


def values_html(texts: list[tuple[str, str, bool]], tip: str = "") -> str:
    """One column of values, a row each: (text, tooltip, muted), right of its sparklines.

    ``tip`` is the column's tooltip, said once on the column: a row whose tooltip is the
    same carries none of its own and shows the column's (as the browser shows an ancestor's).
    """
    rows = "".join([_value_row(item) if item[1] != tip else _value_row((item[0], "", item[2]))
                    for item in texts])
    said = f' title="{_escape(tip)}"' if tip else ""
    return f'<div class="nbgpu-p nbgpu-w"{said}>{rows}</div>'


def grid_html(labels: str, titles: list[str], values: list[list[tuple[str, str, bool]]],
              below: str = "", tips: list[str] | None = None) -> str:
    """The rows' labels (``label_html``), then every column's title (``title_html``) over its
    values: the layer over the panel's one figure of sparklines, each column's values in the
    gap right of its lines; ``below`` (the processes line) under the rows; ``tips``: each
    column's tooltip (``values_html``'s)."""
    tips = tips if tips is not None else [""] * len(titles)
    cols = "".join([f'<div class="nbgpu-c">{title}{values_html(texts, tip)}</div>'
                    for title, texts, tip in zip(titles, values, tips, strict=True)])
    return f'<div class="nbgpu-g">{labels}{cols}</div>{below}'


_value_rows: dict[tuple[str, str, bool], str] = {}  # a row's HTML: most rows come again


def _value_row(item: tuple[str, str, bool]) -> str:
    """The HTML of one value row (text, tooltip, muted), remembered like ``_escape``'s texts."""
    out = _value_rows.get(item)
    if out is None:
        text, tip, muted = item
        if len(_value_rows) >= MAX_ESCAPED:
            _value_rows.clear()
        said = f' title="{_escape(tip)}"' if tip else ""
        label, _, value = text.rpartition("\n")
        shown = (f'<span class="nbgpu-h">{_escape(label)}</span>' if label else "") + _escape(value)
        out = _value_rows[item] = (f'<div class="nbgpu-r nbgpu-n nbgpu-v{" nbgpu-m" if muted else ""}"'
                                   f'{said}>{shown}</div>')
    return out


def badge(text: str, background: str, tip: str = "") -> str:
    return (f'<span class="nbgpu-b" style="background:{background}" title="{_escape(tip)}">'
            f'{_escape(text)}</span>')


def label_html(rows: list[dict], span: str = "", span_tip: str = "") -> str:
    """The left column: ``span`` (what the lines' width covers) on the columns' title line,
    then per row a title line (index, name, badges) and a muted detail line (its tooltip the
    row's ``tip``)."""
    out = []
    for r in rows:
        badges = ""
        if r.get("lost"):
            badges += badge("LOST", "var(--jp-error-color1,#d32f2f)",
                            "this GPU stopped answering (fell off the bus or was reset)")
        for severity, rule, tip in r.get("alerts", ()):
            badges += badge("⚠ " + rule, SEVERITY_COLORS.get(severity, SEVERITY_COLORS["info"]), tip)
        name = _escape(r.get("name", ""))
        detail = _escape(r.get("detail", "")) or "&nbsp;"
        tip = f' title="{_escape(r["tip"])}"' if r.get("tip") else ""
        out.append(f'<div class="nbgpu-r"><div><b>{_escape(str(r["title"]))}</b> '
                   f'<span title="{name}">{name}</span>{badges}</div>'
                   f'<div class="nbgpu-m nbgpu-n nbgpu-d"{tip}>{detail}</div></div>')
    said = f' title="{_escape(span_tip)}"' if span_tip else ""
    return (f'<div class="nbgpu-p nbgpu-l" style="padding:0 8px 0 0">'
            f'<div class="nbgpu-m nbgpu-t nbgpu-span"{said}>{_escape(span) or "&nbsp;"}</div>'
            f'<div style="height:{STRIP_PX}px"></div>{"".join(out)}</div>')


def header_html(describe: str, simulated: bool, state: str, state_color: str, note: str = "") -> str:
    """The top line: what is monitored, a SIMULATED badge, the state, and any warning."""
    sim = badge("SIMULATED", "var(--jp-warn-color0,#c45500)",
                "these GPUs are simulated: the numbers are made up, for demos and tests") \
        if simulated else ""
    state_html = (f'<span style="color:{state_color};font-weight:600;margin-left:8px">'
                  f'{_escape(state)}</span>')
    note_html = (f'<div class="nbgpu-m" style="font-size:11px;white-space:normal">{_escape(note)}</div>'
                 if note else "")
    return (f'<div class="nbgpu-p" style="line-height:1.4"><b>nbgpu</b> '
            f'<span class="nbgpu-m">{_escape(describe)}</span> {sim}{" " if sim else ""}'
            f'{state_html}{note_html}</div>')


def snapshot_html(cols: list[Column], rows: list[Device], values: list[list[tuple[str, str, bool]]]
                  ) -> str:
    """The last values of a stopped panel as one static table (the live widgets are closed)."""
    if not values or not rows:
        return ""
    head = "".join(f"<th>{_escape(c.title)}</th>" for c in cols)
    body = []
    for i, dev in enumerate(rows):
        key = dev.key
        title = "host" if key == HOST_KEY else f"GPU {key}"
        cells = "".join(f"<td>{_escape(col[i][0])}</td>" for col in values if i < len(col))
        body.append(f"<tr><td><b>{_escape(title)}</b></td>{cells}</tr>")
    return (f'<div class="nbgpu-p nbgpu-m" style="font-size:11px"><table class="nbgpu-n" '
            f'style="border-collapse:collapse">'
            f'<tr><th>last values</th>{head}</tr>{"".join(body)}</table></div>')


def title_html(text: str, tip: str) -> str:
    """A column title (static)."""
    body = _escape(text) or "&nbsp;"
    return f'<div class="nbgpu-p nbgpu-m nbgpu-t" title="{_escape(tip)}">{body}</div>'

