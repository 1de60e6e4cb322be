"""``nbgpu.history()``: one row per profiled cell, to compare runs or save them.

Records are small (times, a first line, a reference to the capture); their summaries are
computed when first asked for, so recording a cell costs nothing but an append. The list
is bounded: the oldest records go first.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .summary import SUMMARY_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from .capture import Capture

MAX_RECORDS = 10_000
FIRST_LINE_CHARS = 80


@dataclass
class CellRecord:
    """One profiled cell: where it came from and its capture."""

    execution_count: int | None
    cell_id: str | None
    source: str
    capture: Capture

    @property
    def first_line(self) -> str:
        for line in self.source.splitlines():
            if line.strip():
                text = line.strip()
                return text if len(text) <= FIRST_LINE_CHARS else text[: FIRST_LINE_CHARS - 1] + "…"
        return ""


_records: deque[CellRecord] = deque(maxlen=MAX_RECORDS)


def add(record: CellRecord) -> None:
    """Keep a profiled cell (the oldest is dropped past ``MAX_RECORDS``)."""
    _records.append(record)


def records() -> list[CellRecord]:
    return list(_records)


def clear() -> None:
    """Forget every recorded cell."""
    _records.clear()


def history(per_gpu: bool = False) -> pd.DataFrame:
    """One row per profiled cell: execution count, cell id, first line, start, duration,
    the summary over all GPUs (memory, utilisation, power, energy, temperature, throttling),
    status and the alerts that overlapped the cell.

    Args:
        per_gpu: one row per (cell, GPU) with that GPU's summary instead.
    """
    import pandas as pd

    rows = []
    for rec in list(_records):
        cap = rec.capture
        head = {"execution_count": rec.execution_count, "cell_id": rec.cell_id,
                "first_line": rec.first_line,
                "start": pd.Timestamp(cap.start_time, unit="s", tz="UTC"),
                "duration_s": cap.end_time - cap.start_time, "status": cap.status}
        try:
            summary = cap.summary_rows
        except Exception as exc:  # a sampler closed under us: keep the row, say why
            summary = None
            head["resolution_note"] = f"no summary: {exc}"
        alerts = cap.alerts
        tail = {"alerts": len(alerts),
                "alert_rules": ", ".join(sorted({str(getattr(a, "rule", "")) for a in alerts})),
                "error": cap.error or ""}
        if per_gpu and summary:
            for r in summary:
                row = dict(head)
                row.update({k: v for k, v in r.items()
                            if k not in head and k not in ("start", "end", "alerts", "label")})
                row.update(tail)
                rows.append(row)
            continue
        row = dict(head)
        totals = cap.totals if summary is not None else {}
        totals.pop("duration_s", None)
        row.update(totals)
        peaks = [r["torch_peak_allocated_bytes"] for r in summary or [] if "torch_peak_allocated_bytes" in r]
        if peaks:
            row["torch_peak_allocated_bytes"] = max(peaks)
            row["torch_reserved_end_bytes"] = sum(r["torch_reserved_end_bytes"] for r in summary)
        row.update(tail)
        rows.append(row)
    base = ["execution_count", "cell_id", "first_line", "start", "duration_s", "status"]
    if not rows:
        extra = [c for c in SUMMARY_COLUMNS if c not in base and c not in ("start", "end")]
        return pd.DataFrame(columns=base + extra + ["alerts", "alert_rules", "error"])
    df = pd.DataFrame(rows)
    order = base + [c for c in df.columns if c not in base]
    return df[order]
