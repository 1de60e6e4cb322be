"""A recorded run read back from any of the three timeline formats, safely."""

from __future__ import annotations

import contextlib
import json
import math
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import FileError
from .files import COUNTER_COLUMNS, PARQUET_EVENTS_KEY, file_error, kind_of
from .metrics import BY_NAME, GPU_METRICS, max_column, plausible

if TYPE_CHECKING:
    import pandas as pd


_TEXT = ("name", "uuid", "parent", "host")  # device labels: text (or an index) or None


@dataclass
class Run:
    """A recorded run: its rows, its events (run header, marks, alerts, ...) and skipped lines."""

    frame: pd.DataFrame
    events: list[dict] = field(default_factory=list)
    skipped_lines: int = 0
    path: str = ""

    @property
    def header(self) -> dict:
        """The ``run`` event the recorder writes first (command, source, devices), or {}."""
        return next((e for e in self.events if e.get("event") == "run"), {})

    def devices(self) -> list[dict]:
        """The header's well-formed device descriptions (a label that is not text read as None);
        without a header (CSV), each GPU's first ``name`` in the rows."""
        devices = self.header.get("devices")
        if isinstance(devices, list):
            return [{k: (v if k not in _TEXT or v is None or type(v) in (str, int) else None)
                     for k, v in d.items()}
                    for d in devices if isinstance(d, dict) and isinstance(d.get("index"), (int, str))]
        if "name" not in self.frame.columns or not len(self.frame):
            return []
        first = self.frame.drop_duplicates("gpu")
        return [{"index": g, "name": n} for g, n in zip(first["gpu"], first["name"], strict=True)
                if isinstance(n, str)]

    @property
    def simulated(self) -> bool:
        """Whether the run was recorded on simulated GPUs (its header says so, or a GPU's name)."""
        return self.header.get("simulated") is True or any(
            "(simulated)" in str(d.get("name") or "") for d in self.devices())

    def marks(self) -> list[tuple[float, str]]:
        """(epoch seconds, label) of every mark."""
        return [(e["time_s"], str(e.get("label", ""))) for e in self.events if e.get("event") == "mark"]

    def stack_samples(self) -> list[tuple[float, str, int | None, str]]:
        """(epoch seconds, category, cell line, its text) of the main thread's stack samples
        (the recorder's ``stacks`` lines), oldest first; malformed entries are skipped."""
        from .diagnostics.stacks import CODE

        out = []
        for e in self.events:
            if e.get("event") != "stacks":
                continue
            try:
                t0, table = float(e["t0"]), [(int(n), str(text)) for n, text in e.get("lines") or []]
                for ms, category, i in e.get("samples") or []:
                    if category in CODE:
                        line = table[i] if isinstance(i, int) and 0 <= i < len(table) else (None, "")
                        out.append((t0 + float(ms) / 1000.0, category, *line))
            except (KeyError, TypeError, ValueError):
                continue
        return sorted(out, key=lambda s: s[0])


# The keys of a reading line that are read (with each tick's ``<metric>_max`` peaks); others are ignored.
PEAK_OF = {max_column(m.name): m.name for m in GPU_METRICS}
ROW_KEYS = frozenset(BY_NAME) | frozenset(PEAK_OF) | {"timestamp", "gpu_id", "gpu", "decimated", "_line"}


def _bad(path: str, what: str) -> FileError:
    return FileError(f"cannot read {path}: {what}; give a file written by `nbgpu record` or an "
                     "nbgpu export", path=path)


def _times(path: str, values: pd.Series, where: str) -> pd.Series:
    """ISO 8601 text (or datetimes) as UTC nanosecond timestamps, or FileError naming a bad one."""
    import pandas as pd

    with contextlib.suppress(ValueError, TypeError, OverflowError):
        text = (values if pd.api.types.is_datetime64_any_dtype(values)  # else only text is a time
                else values.map(lambda v: v if isinstance(v, str) else None))
        parsed = pd.to_datetime(text, utc=True, format="ISO8601", errors="coerce")
        bad = parsed.isna()
        if not bad.any():
            return parsed.astype("datetime64[ns, UTC]")
        first = bad.to_numpy().nonzero()[0][0]
        raise _bad(path, f"{where} {values.index[first]!s}: {str(values.iloc[first])[:40]!r} is not an "
                   "ISO 8601 time")
    raise _bad(path, f"its {where.split()[0]} times are not ISO 8601 times")


def _numeric(df: pd.DataFrame) -> pd.DataFrame:
    """Metric columns as floats (anything unreadable NaN, and anything no reading can be:
    infinite, negative, huge); GPU keys as ints or text."""
    import numpy as np
    import pandas as pd

    for col in df.columns:
        metric = PEAK_OF.get(col, col)  # a tick's peak column is judged as its metric
        if metric in BY_NAME or col == "decimated":
            values = pd.to_numeric(df[col], errors="coerce")
            if values.dtype.kind == "f" and metric in BY_NAME:  # what no reading can be reads as NaN
                values = values.where(plausible(metric, values.to_numpy()))
            elif values.dtype.kind == "f":
                values = values.where(np.isfinite(values))
            df[col] = values
    if "gpu" in df and df["gpu"].dtype == object:
        df["gpu"] = df["gpu"].map(lambda g: g if isinstance(g, (int, str)) and not isinstance(g, bool)
                                  else str(g))
    for col in COUNTER_COLUMNS:  # keep a counter reading only where its value first appears
        if col in df and "gpu" in df and len(df):
            df.loc[df[col] == df.groupby("gpu", sort=False)[col].shift(), col] = math.nan
    return df


def _check_regular(path: str) -> None:
    """FileError unless ``path`` is a regular file that is not empty (a FIFO would block forever)."""
    if not path:
        raise FileError("cannot read '': the path is empty; give the file `nbgpu record -o` wrote", path=path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileError(f"no such file: {path}; give the file `nbgpu record -o` wrote", path=path) from None
    except OSError as exc:
        raise file_error("read", path, exc) from exc
    if what := kind_of(st.st_mode):
        raise _bad(path, f"it is {what}")
    if st.st_size == 0:
        raise _bad(path, "the file is empty")


def _check_frame(path: str, df: pd.DataFrame, lines: object = None) -> pd.DataFrame:
    """Rows with a ``time`` (ISO text, as UTC) and ``gpu``; ``lines`` name rows in errors (else 1, 2, ...)."""
    for column in ("time", "gpu"):
        if column not in df.columns:
            raise _bad(path, f"it has no `{column}` column")
    df = _numeric(df.reset_index(drop=True))
    where = range(1, len(df) + 1) if lines is None else lines
    df["time"] = _times(path, df["time"].set_axis(where), "row" if lines is None else "line").array
    return df


def _read_csv(path: str) -> Run:
    import pandas as pd

    try:
        df = pd.read_csv(path, encoding="utf-8", usecols=lambda c: c in ROW_KEYS or c in ("time", "name"))
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        why = str(exc).splitlines()[0][:80] if str(exc).strip() else type(exc).__name__
        raise _bad(path, f"it is not CSV ({why})") from exc
    except OSError as exc:
        raise file_error("read", path, exc) from exc
    return Run(_check_frame(path, df), path=path)


def _read_parquet(path: str) -> Run:
    try:
        import pyarrow.parquet as pq

        names = pq.read_schema(path).names
        table = pq.read_table(path, columns=[n for n in names if n in ROW_KEYS or n == "time"])
        df = table.to_pandas()
    except ImportError as exc:
        raise FileError(f"cannot read {path}: reading Parquet needs pyarrow; run `pip install pyarrow`",
                        path=path) from exc
    except Exception as exc:  # pyarrow raises many kinds for a corrupt file
        if isinstance(exc, OSError) and exc.errno is not None:
            raise file_error("read", path, exc) from exc
        raise _bad(path, "it is not a valid Parquet file") from exc
    events = []
    raw = (table.schema.metadata or {}).get(PARQUET_EVENTS_KEY)
    if raw is not None:
        try:
            events = _events(path, json.loads(raw))
        except ValueError as exc:
            raise _bad(path, "its nbgpu metadata is not valid JSON") from exc
    return Run(_check_frame(path, df), events, 0, path)


def _events(path: str, records: object) -> list[dict]:
    """Event records with their ``time_s``; FileError on a bad timestamp."""
    import pandas as pd

    if not isinstance(records, list) or not all(isinstance(e, dict) for e in records):
        raise _bad(path, "its events are not a list of records")
    if not records:
        return []
    stamps = pd.Series([e.get("timestamp") for e in records], dtype=object,
                       index=[e.get("_line", i + 1) for i, e in enumerate(records)])
    times = _times(path, stamps, "line" if "_line" in records[0] else "event")
    out = []
    for e, t in zip(records, times, strict=True):
        e = {k: v for k, v in e.items() if k != "_line"}
        e["time_s"] = t.timestamp()
        out.append(e)
    return out


def _read_jsonl(path: str) -> Run:
    import pandas as pd

    rows, events, skipped = [], [], 0
    try:
        with open(path, "rb") as fh:
            for number, raw in enumerate(fh, 1):
                if not raw.strip():
                    continue
                try:
                    rec = json.loads(raw.decode("utf-8"))
                except ValueError:  # a line torn by a crash, or not JSON at all
                    rec = None
                if not isinstance(rec, dict) or "timestamp" not in rec:
                    skipped += 1
                    continue
                rec["_line"] = number
                if "event" in rec:
                    events.append(rec)
                else:  # only the keys a reading has: a file of many other keys stays small
                    rows.append({k: rec[k] for k in ROW_KEYS.intersection(rec)})
    except OSError as exc:
        raise file_error("read", path, exc) from exc
    if not rows and not events:
        raise _bad(path, "it holds no nbgpu records")
    df = pd.DataFrame(rows or {"timestamp": [], "_line": []}).drop(columns=["gpu"], errors="ignore").rename(
        columns={"gpu_id": "gpu", "timestamp": "time"})
    if "gpu" not in df:
        df["gpu"] = None
    lines = df.pop("_line")
    return Run(_check_frame(path, df[["time", *(c for c in df.columns if c != "time")]], lines),
               _events(path, events), skipped, path)


def load_run(path: str | os.PathLike) -> Run:
    """Read a run written by ``nbgpu record`` or ``Timeline.to_jsonl/to_csv/to_parquet``."""
    text = os.fsdecode(path) if path is not None else ""
    _check_regular(text)
    ext = os.path.splitext(text)[1].lower()
    return {".csv": _read_csv, ".parquet": _read_parquet}.get(ext, _read_jsonl)(text)
