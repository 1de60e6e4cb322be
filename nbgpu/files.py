"""Timeline files (CSV, JSON lines, Parquet): written without destroying anything, read back safely.

An export goes to a temporary file in the target's own folder and is renamed over the target
only once complete, so a failed export never leaves a truncated file where a good one was. A
symbolic link is followed (its target is replaced, the link stays); a device, FIFO or socket is
refused, never replaced. A new file gets the mode the umask gives; an existing file keeps its
mode. Every failure is one ``FileError`` line naming the path the user gave.

``jsonl_record`` is the one builder of JSON-lines records, used by ``Timeline.to_jsonl`` and by
``nbgpu record``; ``load_run`` reads any of the three formats back into a ``Run``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING

from .errors import FileError
from .metrics import BY_NAME

if TYPE_CHECKING:
    import pandas as pd

# The record keys of the widely copied monitoring script, from nbgpu's columns.
LEGACY_KEYS = {
    "gpu_util_percent": ("util_pct", 1.0),
    "memory_used_gb": ("mem_used_bytes", 1e-9),
    "memory_total_gb": ("mem_total_bytes", 1e-9),
    "memory_util_percent": ("mem_util_pct", 1.0),
    "temperature_c": ("temp_c", 1.0),
    "power_w": ("power_w", 1.0),
}
# Cumulative counters: in a filled file a repeated value is a copy of an earlier reading.
COUNTER_COLUMNS = ("energy_j",)
# Parquet schema metadata key holding a recording's events (run header, marks, alerts).
PARQUET_EVENTS_KEY = b"nbgpu.events"

_HINTS = {
    errno.ENOSPC: "the disk is full; free some space or write elsewhere",
    errno.EDQUOT: "the disk quota is used up; free some space or write elsewhere",
    errno.EFBIG: "the file is larger than this process may write (ulimit -f); raise the limit",
    errno.EROFS: "the filesystem is read-only; write somewhere else",
    errno.EACCES: "permission denied; choose a folder you can write to",
    errno.EPERM: "permission denied; choose a folder you can write to",
    errno.EISDIR: "it is a folder; give a file name",
    errno.ENOENT: "its folder does not exist; create it first",
    errno.ENOTDIR: "a part of the path is not a folder; check the path",
    errno.ELOOP: "too many symbolic links (a loop?); check the path",
    errno.ENAMETOOLONG: "the name is too long; use a shorter one",
}
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def file_error(verb: str, path: str, exc: OSError) -> FileError:
    """One line for an OSError on ``path`` (the user's path, never a temporary file)."""
    reason = _HINTS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
    return FileError(f"cannot {verb} {path}: {reason}", path=path)


def _kind(mode: int) -> str | None:
    return next((name for test, name in _KINDS if test(mode)), None)


def check_target(path: str | os.PathLike) -> tuple[str, str, os.stat_result | None]:
    """(the user's path, the real path to write, what is there now) or FileError.

    Refuses an empty path, a folder, anything that is not a regular file and a missing
    folder; a symbolic link resolves to its target.
    """
    text = os.fsdecode(path) if path is not None else ""
    if not text:
        raise FileError("cannot write '': the path is empty; give a file name", path=text)
    real = os.path.realpath(text)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise file_error("write", text, exc) from exc
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise FileError(f"cannot write {text}: it is a folder; give a file name", path=text)
    if st is not None and _kind(st.st_mode):
        raise FileError(f"cannot write {text}: it is {_kind(st.st_mode)}, not a regular file; "
                        "nbgpu never replaces one, give another path", path=text)
    if not os.path.isdir(os.path.dirname(real)):
        raise FileError(f"cannot write {text}: folder {os.path.dirname(real)} does not exist; "
                        "create it first", path=text)
    return text, real, st


def _open_new(real: str, existing: os.stat_result | None) -> tuple[int, str, int]:
    """A new temporary file beside ``real`` (owner read/write while written) and its final mode.

    The final mode is ``real``'s own, or what the umask gives a new file (the kernel applies
    the umask at creation, so it is read back rather than changed process-wide).
    """
    folder, name = os.path.split(real)
    while True:
        tmp = os.path.join(folder, f".{name}.nbgpu-{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC, 0o666)
            break
        except FileExistsError:
            continue
    mode = stat.S_IMODE(existing.st_mode if existing is not None else os.fstat(fd).st_mode)
    os.fchmod(fd, 0o600)
    if existing is not None and hasattr(os, "geteuid") and os.geteuid() == 0:
        with contextlib.suppress(OSError):
            os.fchown(fd, existing.st_uid, existing.st_gid)
    return fd, tmp, mode


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield the path of a new temporary file; on success it replaces ``path`` (through a symlink).

    For writers that want a path; ``atomic_file`` is the same with an open file.
    """
    text, real, existing = check_target(path)
    try:
        fd, tmp, mode = _open_new(real, existing)
        os.close(fd)
    except OSError as exc:
        raise file_error("write", text, exc) from exc
    try:
        try:
            yield tmp
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.chmod(tmp, mode)
            os.replace(tmp, real)
        except OSError as exc:
            raise file_error("write", text, exc) from exc
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Yield an open temporary file; on success it replaces ``path`` (through a symlink)."""
    with atomic_path(path) as tmp:
        kw = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
        with open(tmp, mode, **kw) as fh:
            yield fh


class LineFile:
    """A file written in place line by line, each line handed whole to the OS.

    A write that fails (disk full, file too large) cuts the file back to its last complete
    line and raises one ``FileError`` line, so what is there stays readable.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path, real, _ = check_target(path)
        try:
            self._fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _CLOEXEC, 0o666)
        except OSError as exc:
            raise file_error("write", self.path, exc) from exc
        self.size = 0

    def write(self, lines: list[str]) -> None:
        """Append ``lines`` (without newlines), each whole or not at all."""
        for line in lines:
            data = (line + "\n").encode("utf-8")
            done = 0
            try:
                while done < len(data):
                    done += os.write(self._fd, data[done:])
            except OSError as exc:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self.size)
                raise file_error("write", self.path, exc) from exc
            self.size += len(data)

    def close(self) -> None:
        """Flush to disk and close."""
        if self._fd < 0:
            return
        fd, self._fd = self._fd, -1
        try:
            os.fsync(fd)
        except OSError as exc:
            raise file_error("write", self.path, exc) from exc
        finally:
            os.close(fd)


# -- JSON lines ------------------------------------------------------------------------------
def _clean(v: object) -> object:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def jsonl_record(timestamp: str, gpu: object, values: Mapping[str, object]) -> dict:
    """One JSON-lines record: ``timestamp``, ``gpu_id``, the script's keys, then nbgpu's columns."""
    rec: dict = {"timestamp": timestamp, "gpu_id": _clean(gpu)}
    for key, (col, scale) in LEGACY_KEYS.items():
        if col in values:
            v = _clean(values[col])
            rec[key] = None if v is None else round(v * scale, 6)
    for col, v in values.items():
        if col not in ("time", "gpu"):
            rec[col] = _clean(v)
    return rec


def json_line(record: Mapping[str, object]) -> str:
    """A record as one line of strict JSON (no NaN)."""
    return json.dumps(record, default=str, allow_nan=False)


def jsonl_records(df: pd.DataFrame, filled: bool = True) -> Iterator[dict]:
    """JSON-ready records of a timeline frame; ``filled`` repeats each GPU's latest values."""
    if filled and len(df):
        df = df.copy()
        value_cols = [c for c in df.columns if c not in ("time", "gpu", "decimated")]
        df[value_cols] = df.groupby("gpu", sort=False)[value_cols].ffill()
    for row in df.to_dict("records"):
        yield jsonl_record(row["time"].isoformat(), row["gpu"], row)


def write_jsonl(df: pd.DataFrame, path: str, filled: bool = True) -> str:
    """Write ``df`` as JSON lines, atomically; returns the path."""
    with atomic_file(path) as fh:
        for rec in jsonl_records(df, filled=filled):
            fh.write(json_line(rec) + "\n")
    return os.fspath(path)


def write_csv(df: pd.DataFrame, path: str) -> str:
    """Write ``df`` as CSV with ISO 8601 UTC times, atomically; returns the path."""
    out = df.copy()
    out["time"] = out["time"].map(lambda t: t.isoformat())
    with atomic_file(path) as fh:
        out.to_csv(fh, index=False, lineterminator="\n")
    return os.fspath(path)


def write_parquet(df: pd.DataFrame, path: str, events: list[dict] | None = None) -> str:
    """Write ``df`` as Parquet (needs pyarrow), ``events`` in its schema metadata; atomically."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise FileError("to_parquet needs pyarrow; run `pip install pyarrow`, or use "
                        "to_csv / to_jsonl", path=os.fspath(path)) from exc
    if "gpu" in df and df["gpu"].dtype == object and df["gpu"].map(type).nunique() > 1:
        df = df.assign(gpu=df["gpu"].astype(str))  # cards (0) beside MIG slices ("0/1"): one type
    table = pa.Table.from_pandas(df, preserve_index=False)
    if events is not None:
        meta = dict(table.schema.metadata or {})
        meta[PARQUET_EVENTS_KEY] = json.dumps(events, default=str, allow_nan=False).encode()
        table = table.replace_schema_metadata(meta)
    with atomic_file(path, "wb") as fh:
        pq.write_table(table, fh)
    return os.fspath(path)


# -- reading a run back ----------------------------------------------------------------------
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
        """The header's device descriptions (``index``, ``name``, ...) that are well formed."""
        devices = self.header.get("devices")
        return [d for d in devices if isinstance(d, dict) and isinstance(d.get("index"), (int, str))] \
            if isinstance(devices, list) else []

    def marks(self) -> list[tuple[float, str]]:
        """(epoch seconds, label) of every mark."""
        return [(e["time_s"], str(e.get("label", ""))) for e in self.events if e.get("event") == "mark"]

    def alerts(self) -> list[dict]:
        """The alert events."""
        return [e for e in self.events if e.get("event") == "alert"]


def _bad(path: str, what: str) -> FileError:
    return FileError(f"cannot read {path}: {what}; give a file written by `nbgpu record` or an "
                     "nbgpu export", path=path)


def _times(path: str, values: pd.Series, where: str) -> pd.Series:
    """ISO 8601 text (or datetimes) as UTC nanosecond timestamps, or FileError naming a bad one."""
    import pandas as pd

    with contextlib.suppress(ValueError, TypeError, OverflowError):
        if isinstance(values.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(values):
            parsed = values.dt.tz_convert("UTC") if values.dt.tz is not None else values.dt.tz_localize("UTC")
        else:
            text = values.map(lambda v: v if isinstance(v, str) else None)
            parsed = pd.to_datetime(text, utc=True, format="ISO8601", errors="coerce")
        bad = parsed.isna()
        if not bad.any():
            return parsed.astype("datetime64[ns, UTC]")
        first = bad.to_numpy().nonzero()[0][0]
        raise _bad(path, f"{where} {values.index[first]!s}: {str(values.iloc[first])[:40]!r} is not an "
                   "ISO 8601 time")
    raise _bad(path, f"its {where.split()[0]} times are not ISO 8601 times")


def _numeric(df: pd.DataFrame) -> pd.DataFrame:
    """Metric columns as floats (anything unreadable NaN); GPU keys as ints or text."""
    import pandas as pd

    for col in df.columns:
        if col in BY_NAME or col == "decimated":
            df[col] = pd.to_numeric(df[col], errors="coerce")
    if "gpu" in df and df["gpu"].dtype == object:
        df["gpu"] = df["gpu"].map(lambda g: g if isinstance(g, (int, str)) and not isinstance(g, bool)
                                  else str(g))
    for col in COUNTER_COLUMNS:  # keep a counter reading only where its value first appears
        if col in df and "gpu" in df and len(df):
            df.loc[df[col] == df.groupby("gpu", sort=False)[col].shift(), col] = math.nan
    return df


def _open_regular(path: str) -> int:
    """Size of ``path`` if it is a regular file, else FileError (a FIFO would block forever)."""
    if not path:
        raise FileError("cannot read '': the path is empty; give the file `nbgpu record -o` wrote", path=path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileError(f"no such file: {path}; give the file `nbgpu record -o` wrote", path=path) from None
    except OSError as exc:
        raise file_error("read", path, exc) from exc
    if stat.S_ISDIR(st.st_mode):
        raise _bad(path, "it is a folder")
    if not stat.S_ISREG(st.st_mode):
        raise _bad(path, f"it is {_kind(st.st_mode) or 'not a regular file'}")
    if st.st_size == 0:
        raise _bad(path, "the file is empty")
    return st.st_size


def _check_frame(path: str, df: pd.DataFrame) -> pd.DataFrame:
    if "time" not in df.columns:
        raise _bad(path, "it has no `time` column")
    if "gpu" not in df.columns:
        raise _bad(path, "it has no `gpu` column")
    df = _numeric(df.reset_index(drop=True))
    df["time"] = _times(path, df["time"].set_axis(range(1, len(df) + 1)), "row").to_numpy()
    return df


def _read_csv(path: str) -> Run:
    import pandas as pd

    try:
        df = pd.read_csv(path, encoding="utf-8")
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        why = str(exc).splitlines()[0][:80] if str(exc).strip() else type(exc).__name__
        raise _bad(path, f"it is not CSV ({why})") from exc
    except OSError as exc:
        raise file_error("read", path, exc) from exc
    return Run(_check_frame(path, df), path=path)


def _read_parquet(path: str) -> Run:
    import pandas as pd

    try:
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        df = table.to_pandas()
    except ImportError as exc:
        raise FileError(f"cannot read {path}: reading Parquet needs pyarrow; run `pip install pyarrow`",
                        path=path) from exc
    except OSError as exc:
        if exc.errno is not None:
            raise file_error("read", path, exc) from exc
        raise _bad(path, "it is not a valid Parquet file") from exc
    except Exception as exc:  # pyarrow raises many kinds for a corrupt file
        raise _bad(path, "it is not a valid Parquet file") from exc
    if not isinstance(df, pd.DataFrame):
        raise _bad(path, "it is not a table")
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
                    skipped += 1
                    continue
                if not isinstance(rec, dict) or "timestamp" not in rec:
                    skipped += 1
                    continue
                rec["_line"] = number
                (events if "event" in rec else rows).append(rec)
    except OSError as exc:
        raise file_error("read", path, exc) from exc
    if not rows and not events:
        raise _bad(path, "it holds no nbgpu records")
    events = _events(path, events)
    if not rows:
        df = pd.DataFrame({"time": pd.Series(dtype="datetime64[ns, UTC]"), "gpu": pd.Series(dtype=object)})
        return Run(df, events, skipped, path)
    df = pd.DataFrame(rows)
    lines = df.pop("_line")
    df = df.drop(columns=[k for k in LEGACY_KEYS if k not in BY_NAME and k in df.columns])
    df = df.drop(columns=["gpu"], errors="ignore").rename(columns={"gpu_id": "gpu"})
    if "gpu" not in df:
        df["gpu"] = None
    stamps = df.pop("timestamp")
    stamps.index = lines
    df = _numeric(df)
    df.insert(0, "time", _times(path, stamps, "line").to_numpy())
    return Run(df, events, skipped, path)


def load_run(path: str | os.PathLike) -> Run:
    """Read a run written by ``nbgpu record`` or ``Timeline.to_jsonl/to_csv/to_parquet``.

    Anything that is not such a file gives one ``FileError`` line saying what is wrong.
    Metric columns read as floats (unreadable cells NaN); in a filled file a repeated energy
    counter value is a copy, not a reading, so it reads as NaN (else a short run shows 0 J).
    """
    text = os.fsdecode(path) if path is not None else ""
    _open_regular(text)
    ext = os.path.splitext(text)[1].lower()
    if ext == ".csv":
        return _read_csv(text)
    if ext == ".parquet":
        return _read_parquet(text)
    return _read_jsonl(text)
