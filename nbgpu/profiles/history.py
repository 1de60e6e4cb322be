"""``nbgpu.history()``: one row per profiled cell, to compare runs or save them."""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import os
from collections import deque
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from ..diagnostics.stacks import CATEGORIES
from ..errors import warn_user
from ..files import as_path, file_error, json_value
from ..units import as_float
from . import history_file
from .compare import RunFigures, capture_figures
from .cost import cost_of
from .summary import SUMMARY_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from .capture import Capture


MAX_RECORDS = 10_000
MAX_SAVED = 1_000
FIRST_LINE_CHARS = 80
ENV_HISTORY_FILE = "NBGPU_HISTORY_FILE"
_ROW_SKIP = ("start", "end", "alerts", "label")
_TAIL = ("alerts", "alert_rules", "error", *(f"share_{c}" for c in CATEGORIES), "top_line", "steps_per_s")


def _first_line(source: str) -> str:
    """The cell's first meaningful line: not blank, a comment, a magic or an import (the first
    non-blank line when every line is one of those)."""
    lines = [line.strip() for line in source.splitlines() if line.strip()]
    skip = ("#", "%", "!", "import ", "from ")
    text = next((line for line in lines if not line.startswith(skip)), lines[0] if lines else "")
    return text if len(text) <= FIRST_LINE_CHARS else text[: FIRST_LINE_CHARS - 1] + "…"


def source_hash(source: str) -> str:
    """A short digest of a cell's text (surrounding blank space ignored), to find its last run."""
    return hashlib.sha1(source.strip().encode("utf-8", "replace")).hexdigest()[:16]


@dataclass
class CellRecord:
    """One profiled cell of this kernel: where it came from and its capture."""

    execution_count: int | None
    cell_id: str | None
    source: str
    capture: Capture
    _figures: RunFigures | None = field(default=None, repr=False, compare=False)

    @property
    def first_line(self) -> str:
        return _first_line(self.source)

    @cached_property
    def source_hash(self) -> str:
        """The digest of the cell's text (computed once: lookups of its last run read it)."""
        return source_hash(self.source)

    @property
    def start_time(self) -> float:
        return self.capture.start_time

    def figures(self) -> RunFigures:
        """The compared figures of this cell (with their noise), computed once."""
        if self._figures is None:
            self._figures = capture_figures(self.capture)
        return self._figures

    def head(self) -> dict:
        cap = self.capture
        return {"execution_count": self.execution_count, "cell_id": self.cell_id,
                "first_line": self.first_line, "start": cap.start_time,
                "duration_s": cap.end_time - cap.start_time, "status": cap.status}

    def tail(self) -> dict:
        alerts = self.capture.alerts
        split_of = getattr(self.capture, "split", None)  # a stand-in capture may have none
        split = split_of() if callable(split_of) else None
        top = split.top_line if split is not None else None
        return {"alerts": len(alerts),
                "alert_rules": ", ".join(sorted({str(getattr(a, "rule", "")) for a in alerts})),
                "error": self.capture.error or "",
                **{f"share_{c}": None if split is None else round(split.shares[c], 4) for c in CATEGORIES},
                "top_line": "" if top is None else f"line {top['line']} `{top['text']}`: "
                                                   f"{100 * top['share']:.0f} %",
                "steps_per_s": _steps_per_s(self.capture)}

    def gpu_rows(self) -> list[dict]:
        return self.capture.summary_rows

    def totals(self) -> dict:
        rows = self.gpu_rows()
        totals = dict(self.capture.totals)
        peaks = [r["torch_peak_allocated_bytes"] for r in rows if "torch_peak_allocated_bytes" in r]
        if peaks:
            totals["torch_peak_allocated_bytes"] = max(peaks)
            totals["torch_reserved_end_bytes"] = sum(r.get("torch_reserved_end_bytes", 0) for r in rows)
        return totals

    def to_json(self) -> dict:
        """The record as plain data for the persistent history file."""
        return {"v": 1, **{k: json_value(v) for k, v in self.head().items()},
                "source_hash": self.source_hash, **{k: json_value(v) for k, v in self.tail().items()},
                "totals": {k: json_value(v) for k, v in self.totals().items()},
                "gpus": [{k: json_value(v) for k, v in r.items() if k not in _ROW_SKIP}
                         for r in self.gpu_rows()],
                "figures": self.figures().to_json()}


def _steps_per_s(cap: Capture) -> float | None:
    """Iterations a second of the ``nbgpu.track`` loops run in the block (None: none ran)."""
    spans = [t1 - t0 for t in getattr(cap, "trackers", ()) for _, _, t0, t1, _ in t.spans
             if math.isfinite(t1) and t1 > t0]
    return round(len(spans) / sum(spans), 4) if spans else None


@dataclass
class SavedRecord:
    """A profiled cell read back from the persistent history file (an earlier kernel, maybe)."""

    data: dict

    execution_count = property(lambda self: self.data.get("execution_count"))
    cell_id = property(lambda self: self.data.get("cell_id"))
    first_line = property(lambda self: self.data.get("first_line", ""))
    source_hash = property(lambda self: self.data.get("source_hash", ""))
    start_time = property(lambda self: float(self.data.get("start") or math.nan))

    def figures(self) -> RunFigures:
        return RunFigures.from_json(self.data.get("figures") or {})

    def head(self) -> dict:
        return {k: self.data.get(k) for k in ("execution_count", "cell_id", "first_line", "start",
                                              "duration_s", "status")}

    def tail(self) -> dict:
        return {k: self.data.get(k) for k in _TAIL}

    def gpu_rows(self) -> list[dict]:
        return [dict(r) for r in self.data.get("gpus") or []]

    def totals(self) -> dict:
        return dict(self.data.get("totals") or {})

    def to_json(self) -> dict:
        return self.data


_records: deque[CellRecord | SavedRecord] = deque(maxlen=MAX_RECORDS)
# Where each record sits in the order added (a record's key is its id()), and the records of
# each cell id and each text digest in that order, so a cell's last run is found without a scan.
_added = 0
_position: dict[int, int] = {}
_by_key: dict[tuple, list[tuple[int, CellRecord | SavedRecord]]] = {}


def _keys(record: CellRecord | SavedRecord) -> list[tuple]:
    keys = [("text", record.source_hash)]
    if record.cell_id:
        keys.append(("cell", record.cell_id))
    return keys


def _index(record: CellRecord | SavedRecord) -> None:
    """Note ``record`` as the newest; forget the index entries of records the deque dropped."""
    global _added
    _added += 1
    _position[id(record)] = _added
    for key in _keys(record):
        _by_key.setdefault(key, []).append((_added, record))
    oldest = _added - len(_records) + 1  # positions below this left the deque
    if len(_position) > 2 * len(_records) + 16:
        _prune(oldest)


def _prune(oldest: int) -> None:
    for key in list(_by_key):
        kept = [item for item in _by_key[key] if item[0] >= oldest]
        if kept:
            _by_key[key] = kept
        else:
            del _by_key[key]
    live = {id(rec) for _, items in _by_key.items() for _, rec in items}
    for rid in [rid for rid in _position if rid not in live]:
        del _position[rid]


def _reindex() -> None:
    """Rebuild the index from the deque (after it was cleared or reordered)."""
    global _added
    _added = 0
    _position.clear()
    _by_key.clear()
    for rec in _records:
        _index(rec)


def _key(data: dict) -> tuple:
    return (data.get("source_hash"), data.get("start"), data.get("execution_count"))


class _Store:
    """The persistent history file: its path; each record is appended under the file's lock."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.env_checked = False
        self.warned = False

    def save(self, records: list[CellRecord]) -> None:
        if not records:
            return
        try:
            lines = [json.dumps(r.to_json(), allow_nan=False) for r in records]
            history_file.append(self.path, lines, MAX_SAVED)
        except Exception as exc:  # never break the user's cell over the history file
            if not self.warned:
                self.warned = True
                warn_user(f"nbgpu: the history file {self.path} could not be written, so this "
                      f"kernel's cells are not kept there: {exc}")


_store = _Store()


def default_history_path() -> str:
    """``$NBGPU_HISTORY_FILE``, else ``$XDG_DATA_HOME/nbgpu/history.jsonl`` (~/.local/share)."""
    if os.environ.get(ENV_HISTORY_FILE):
        return os.path.expanduser(os.environ[ENV_HISTORY_FILE])
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "nbgpu", "history.jsonl")


def _read_saved(path: str) -> list[SavedRecord]:
    saved, bad = history_file.read(path)
    if bad:
        warn_user(f"nbgpu: skipped {bad} unreadable line(s) in the history file {path} "
              "(they stay in the file)")
    return [SavedRecord(d) for d in saved[-MAX_SAVED:]]


def keep_history(path: str | os.PathLike | bool | None = None) -> str | None:
    """Keep ``nbgpu.history()`` in a file across kernel restarts; returns the file's path.

    Args:
        path: the JSON-lines file; None uses ``default_history_path()``; False stops
            writing (the file stays). Cells the file already holds join ``history()``
            and serve as the last run of cells run again. Keeping the file already kept
            does nothing; several kernels may keep one file (each appends its cells).
    """
    if path is False:
        _store.path = None
        return None
    text = default_history_path() if path is None or path is True else as_path(path)
    text = os.path.abspath(os.path.expanduser(text))
    if text == _store.path:
        return text
    history_file.check_path(text)
    try:
        os.makedirs(os.path.dirname(text), exist_ok=True)
    except OSError as exc:
        raise file_error("keep history in", text, exc) from exc
    saved = _read_saved(text)
    live = [r for r in _records if isinstance(r, CellRecord)]
    in_file = {_key(r.data) for r in saved}
    live_keys = {id(r): _key({"source_hash": r.source_hash, "start": json_value(r.start_time),
                              "execution_count": r.execution_count}) for r in live}
    kept_here = set(live_keys.values())
    _records.clear()
    _records.extend(r for r in saved if _key(r.data) not in kept_here)
    _records.extend(live)
    _reindex()
    _store.path, _store.env_checked, _store.warned = text, True, False
    _store.save([r for r in live if live_keys[id(r)] not in in_file])
    return text


def add(record: CellRecord) -> None:
    """Keep a profiled cell (the oldest is dropped past ``MAX_RECORDS``); save it if asked."""
    if not _store.env_checked:
        _store.env_checked = True
        if os.environ.get(ENV_HISTORY_FILE) and _store.path is None:
            try:
                keep_history(None)
            except Exception as exc:
                warn_user(f"nbgpu: {ENV_HISTORY_FILE} is set but cannot be used: {exc}")
    _records.append(record)
    _index(record)
    if _store.path is not None:
        _store.save([record])


def records() -> list[CellRecord | SavedRecord]:
    return list(_records)


def previous(record: CellRecord) -> CellRecord | SavedRecord | None:
    """The newest earlier record of the same cell: same cell id, or same source text."""
    runs = earlier(record, 1)
    return runs[-1] if runs else None


def earlier(record: CellRecord, limit: int = 10) -> list[CellRecord | SavedRecord]:
    """Up to ``limit`` earlier records of the same cell (same cell id or source text), newest last."""
    oldest = _added - len(_records) + 1
    at = _position.get(id(record), 0)
    before = at if oldest <= at and _by_key_holds(record, at) else _added + 1
    found: dict[int, CellRecord | SavedRecord] = {}
    for key in _keys(record):
        for pos, rec in _by_key.get(key, []):
            if oldest <= pos < before:
                found[pos] = rec
    return [found[pos] for pos in sorted(found)][-limit:]


def _by_key_holds(record: CellRecord | SavedRecord, at: int) -> bool:
    """Whether position ``at`` is ``record`` itself (an id() may be reused after a record left)."""
    items = _by_key.get(_keys(record)[0], [])
    i = bisect.bisect_left(items, at, key=lambda item: item[0])
    return i < len(items) and items[i][0] == at and items[i][1] is record


def clear() -> None:
    """Forget every recorded cell (the history file, if kept, stays as it is)."""
    _records.clear()
    _reindex()


def history(per_gpu: bool = False) -> pd.DataFrame:
    """One row per profiled cell (``per_gpu``: per cell and GPU, with that GPU's summary): its summary
    over all GPUs, kWh (cost, CO₂ where configured), status, alerts, where its main thread was
    (``share_*``, ``top_line``) and ``steps_per_s``; cells kept in the history file come first."""
    import pandas as pd

    from .history_view import HistoryFrame

    rows = []
    for rec in list(_records):
        head = rec.head()
        head["start"] = pd.Timestamp(head["start"], unit="s", tz="UTC")
        try:
            parts = rec.gpu_rows() if per_gpu else [rec.totals()]
        except Exception as exc:  # a sampler closed under us: keep the row, say why
            parts, head["resolution_note"] = [{}], f"no summary: {exc}"
        for part in parts or ([] if per_gpu else [{}]):
            row = dict(head)
            row.update({k: v for k, v in part.items() if k not in head and k not in _ROW_SKIP})
            if "energy_j" in part:
                row.update(cost_of(as_float(part["energy_j"])).columns())
            row.update(rec.tail())
            rows.append(row)
    base = ["execution_count", "cell_id", "first_line", "start", "duration_s", "status"]
    if not rows:
        extra = [c for c in SUMMARY_COLUMNS if c not in base and c not in ("start", "end")]
        return HistoryFrame(columns=[*base, *extra, "energy_kwh", *_TAIL])
    df = pd.DataFrame(rows)
    return HistoryFrame(df[base + [c for c in df.columns if c not in base]])
