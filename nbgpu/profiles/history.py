"""``nbgpu.history()``: one row per profiled cell, to compare runs or save them."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import json
import math
import os
import stat
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from ..config import settings
from ..diagnostics.stacks import CATEGORIES
from ..errors import FileError, warn_user
from ..files import as_path, atomic_file, file_error, json_value, kind_of, write_whole
from ..units import as_float
from .comparison import RunFigures, capture_figures
from .cost import cost_of
from .summary import SUMMARY_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

    from .capture import Capture


MAX_RECORDS = 10_000
MAX_SAVED = 1_000
FIRST_LINE_CHARS = 80
_HEAD = ("execution_count", "cell_id", "first_line", "start", "duration_s", "status")
_ROW_SKIP = ("start", "end", "alerts", "label")
_NUMBERS = ("duration_s", "alerts")
_TYPES = {"execution_count": int, "gpus": list, "totals": dict, "figures": dict,
          **dict.fromkeys(("cell_id", "first_line", "source_hash", "status", "error", "alert_rules"), str)}
_TAIL = ("alerts", "alert_rules", "error", *(f"share_{c}" for c in CATEGORIES), "top_line", "steps_per_s")


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
        """The first line that is not blank, a comment, a magic or an import (else the first)."""
        lines = [line.strip() for line in self.source.splitlines() if line.strip()]
        skip = ("#", "%", "!", "import ", "from ")
        text = next((line for line in lines if not line.startswith(skip)), lines[0] if lines else "")
        return text if len(text) <= FIRST_LINE_CHARS else text[: FIRST_LINE_CHARS - 1] + "…"

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
        alerts, split = self.capture.alerts, self.capture.split()
        top = split.top_line if split is not None else None
        spans = [t1 - t0 for t in self.capture.trackers for _, _, t0, t1, _ in t.spans
                 if math.isfinite(t1) and t1 > t0]  # the nbgpu.track loops run in the block
        return {"alerts": len(alerts),
                "alert_rules": ", ".join(sorted({str(getattr(a, "rule", "")) for a in alerts})),
                "error": self.capture.error or "",
                **{f"share_{c}": None if split is None else round(split.shares[c], 4) for c in CATEGORIES},
                "top_line": "" if top is None else f"line {top['line']} `{top['text']}`: "
                                                   f"{100 * top['share']:.0f} %",
                "steps_per_s": round(len(spans) / sum(spans), 4) if spans else None}

    def gpu_rows(self) -> list[dict]:
        return self.capture.summary_rows

    def totals(self) -> dict:
        return self.capture.totals

    def to_json(self) -> dict:
        """The record as plain data for the persistent history file."""
        def plain(row: dict, skip: tuple[str, ...] = ()) -> dict:
            return {k: json_value(v) for k, v in row.items() if k not in skip}

        return {"v": 1, **plain(self.head()), "source_hash": self.source_hash, **plain(self.tail()),
                "totals": plain(self.totals()), "gpus": [plain(r, _ROW_SKIP) for r in self.gpu_rows()],
                "figures": self.figures().to_json()}


@dataclass
class SavedRecord:
    """A profiled cell read back from the persistent history file (an earlier kernel, maybe)."""

    data: dict

    execution_count = property(lambda self: self.data.get("execution_count"))
    cell_id = property(lambda self: self.data.get("cell_id"))
    source_hash = property(lambda self: self.data.get("source_hash", ""))
    start_time = property(lambda self: float(self.data.get("start") or math.nan))

    def figures(self) -> RunFigures:
        return RunFigures.from_json(self.data.get("figures") or {})

    def head(self) -> dict:
        return {k: self.data.get(k) for k in _HEAD}

    def tail(self) -> dict:
        return {k: self.data.get(k) for k in _TAIL}

    def gpu_rows(self) -> list[dict]:
        return [dict(r) for r in self.data.get("gpus") or []]

    def totals(self) -> dict:
        return dict(self.data.get("totals") or {})


_records: deque[CellRecord | SavedRecord] = deque(maxlen=MAX_RECORDS)
# The records of each cell id and each text digest as (order added, record), oldest first,
# so a cell's last run is found without a scan of the history.
_by_key: dict[tuple, list[tuple[int, CellRecord | SavedRecord]]] = {}
_order = itertools.count()


def _keys(record: CellRecord | SavedRecord) -> list[tuple]:
    return [("text", record.source_hash)] + ([("cell", record.cell_id)] if record.cell_id else [])


def _push(record: CellRecord | SavedRecord) -> None:
    """Append ``record`` to the history and its index; the oldest leaves both when full."""
    if len(_records) == _records.maxlen:
        for key in _keys(_records[0]):  # the oldest record is the first of each of its keys
            runs = _by_key[key]
            del runs[0]
            if not runs:
                del _by_key[key]
    _records.append(record)
    n = next(_order)
    for key in _keys(record):
        _by_key.setdefault(key, []).append((n, record))


def _key(rec: CellRecord | SavedRecord) -> tuple:
    """What makes a record the same cell run, in this kernel or in the file."""
    return (rec.source_hash, json_value(rec.start_time), rec.execution_count)


# -- the persistent history file: JSON lines, appended under a lock, read line by line
def _check_path(path: str) -> None:
    """FileError unless ``path`` is missing or a regular file (a symlink is refused)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise file_error("use", path, exc) from exc
    if stat.S_ISLNK(st.st_mode):
        raise FileError(f"cannot keep history in {path}: it is a symbolic link; give the path "
                        "of the file itself", path=path)
    if what := kind_of(st.st_mode):
        raise FileError(f"cannot keep history in {path}: it is {what}, not a regular file; "
                        "give another path", path=path)


def _open(path: str, flags: int) -> int:
    """An fd on the regular file ``path`` (never blocking on a FIFO, never through a symlink)."""
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW, 0o666)  # not inherited (PEP 446)
    except OSError as exc:
        _check_path(path)  # a symlink (ELOOP) or FIFO swapped in: say so
        raise file_error("use", path, exc) from exc
    if what := kind_of(os.fstat(fd).st_mode):  # a FIFO or folder swapped in since the check
        os.close(fd)
        raise FileError(f"cannot keep history in {path}: it is {what}, not a regular file; "
                        "give another path", path=path)
    os.set_blocking(fd, True)
    return fd


@contextlib.contextmanager
def _locked(path: str, shared: bool = False) -> Iterator[None]:
    """Hold the lock of the history file ``path`` (shared for reading, exclusive for writing)."""
    folder, name = os.path.split(path)
    lock = os.path.join(folder, f".{name}.lock")
    fd = -1
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        if not shared:  # a reader in a read-only folder reads without the lock
            raise file_error("write", path, exc) from exc
    try:
        if fd >= 0:
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        if fd >= 0:
            os.close(fd)


def _valid_record(data: dict) -> bool:
    """Whether a version-1 record has the types ``history()`` relies on."""
    def number(v: object) -> bool:
        return math.isfinite(as_float(v))

    return (number(data.get("start")) and all(data.get(k) is None or number(data[k]) for k in _NUMBERS)
            and all(data.get(k) is None or isinstance(data[k], kind) for k, kind in _TYPES.items())
            and not isinstance(data.get("execution_count"), bool)
            and all(isinstance(g, dict) for g in data.get("gpus") or ()))


def _parse(raw: bytes) -> tuple[str, dict | None]:
    """("record", data), ("bad", None) for a broken line or record, ("other", None) otherwise."""
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return "bad", None
    if not text or text.startswith("#"):
        return "other", None
    try:
        data = json.loads(text)
    except ValueError:
        return "bad", None
    if not isinstance(data, dict) or data.get("v") != 1:
        return "other", None
    return ("record", data) if _valid_record(data) else ("bad", None)


def _read_bytes(path: str) -> list[bytes]:
    if not os.path.lexists(path):  # nothing kept there yet
        return []
    with os.fdopen(_open(path, os.O_RDONLY), "rb") as fh:
        return fh.read().splitlines()


def _append_file(path: str, lines: list[str]) -> None:
    """Append ``lines`` under the lock; past 1.5 × ``MAX_SAVED`` records, drop the oldest records
    (never a line nbgpu does not understand)."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    with _locked(path):
        fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:  # a full disk: cut back to the last whole line (we hold the lock)
            write_whole(fd, data, path, os.fstat(fd).st_size)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size <= 2048 * MAX_SAVED:  # cheap first test before counting the records
            return
        old = _read_bytes(path)
        records = [i for i, raw in enumerate(old) if _parse(raw)[0] == "record"]
        if len(records) > MAX_SAVED * 3 // 2:
            gone = set(records[:len(records) - MAX_SAVED])  # the oldest records, never another line
            with atomic_file(path, "wb") as fh:
                fh.writelines(raw + b"\n" for i, raw in enumerate(old) if i not in gone)


class _Store:
    """The persistent history file: its path; each record is appended under the file's lock."""

    def __init__(self) -> None:
        self.path: str | None = None
        self.configured = ""  # NbGpu.history_path as last applied
        self.warned = False

    def save(self, records: list[CellRecord]) -> None:
        if not records:
            return
        try:
            lines = [json.dumps(r.to_json(), allow_nan=False) for r in records]
            _append_file(self.path, lines)
        except Exception as exc:  # never break the user's cell over the history file
            if not self.warned:
                self.warned = True
                warn_user(f"nbgpu: the history file {self.path} could not be written, so this "
                      f"kernel's cells are not kept there: {exc}")


_store = _Store()


def keep_history(path: str | os.PathLike | bool | None = None) -> str | None:
    """Keep ``nbgpu.history()`` in a JSON-lines file across kernel restarts (None: the default
    path, False: stop writing); returns the path. Cells already in the file join ``history()``."""
    if path is False:
        _store.path = None
        return None
    if path is None or path is True:  # NbGpu.history_path, else $XDG_DATA_HOME (~/.local/share)/nbgpu
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
        path = settings().history_path or os.path.join(base, "nbgpu", "history.jsonl")
    text = os.path.abspath(os.path.expanduser(as_path(path)))
    if text == _store.path:
        return text
    _check_path(text)
    try:
        os.makedirs(os.path.dirname(text), exist_ok=True)
    except OSError as exc:
        raise file_error("keep history in", text, exc) from exc
    with _locked(text, shared=True):
        parsed = [_parse(raw) for raw in _read_bytes(text)]
    if bad := sum(kind == "bad" for kind, _ in parsed):
        warn_user(f"nbgpu: skipped {bad} unreadable line(s) in the history file {text} "
                  "(they stay in the file)")
    saved = [SavedRecord(d) for kind, d in parsed if kind == "record"][-MAX_SAVED:]
    live = [r for r in _records if isinstance(r, CellRecord)]
    in_file, here = {_key(r) for r in saved}, {_key(r) for r in live}
    clear()
    for rec in [*(r for r in saved if _key(r) not in here), *live]:
        _push(rec)
    _store.path, _store.warned = text, False
    _store.save([r for r in live if _key(r) not in in_file])
    return text


def add(record: CellRecord) -> None:
    """Keep a profiled cell (the oldest is dropped past ``MAX_RECORDS``); save it if asked."""
    configured = settings().history_path  # %config NbGpu.history_path, $NBGPU_HISTORY_FILE
    if configured != _store.configured:  # newly set: kept there from this cell on
        _store.configured = configured
        if configured:
            try:
                keep_history(configured)
            except Exception as exc:
                warn_user(f"nbgpu: NbGpu.history_path ({configured}) cannot be used: {exc}")
    _push(record)
    if _store.path is not None:
        _store.save([record])


def records() -> list[CellRecord | SavedRecord]:
    return list(_records)


def earlier(record: CellRecord, limit: int = 10) -> list[CellRecord | SavedRecord]:
    """Up to ``limit`` earlier records of the same cell (same cell id or source text), newest last."""
    keys = _keys(record)
    at = next((n for n, rec in reversed(_by_key.get(keys[0], ())) if rec is record), math.inf)
    found = {n: rec for key in keys for n, rec in _by_key.get(key, ()) if n < at}
    return [found[n] for n in sorted(found)][-limit:]


def clear() -> None:
    """Forget every recorded cell (the history file, if kept, stays as it is)."""
    _records.clear()
    _by_key.clear()


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
        for part in parts:
            row = dict(head)
            row.update({k: v for k, v in part.items() if k not in head and k not in _ROW_SKIP})
            if "energy_j" in part:
                row.update(cost_of(as_float(part["energy_j"])).columns())
            row.update(rec.tail())
            rows.append(row)
    if not rows:
        extra = [c for c in SUMMARY_COLUMNS if c not in _HEAD and c != "end"]
        return HistoryFrame(columns=[*_HEAD, *extra, "energy_kwh", *_TAIL])
    df = pd.DataFrame(rows)
    return HistoryFrame(df[[*_HEAD, *(c for c in df.columns if c not in _HEAD)]])
