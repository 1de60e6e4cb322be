"""Timeline files (CSV, JSON lines, Parquet), written without destroying anything."""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import math
import os
import secrets
import stat
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING

from .errors import BadArgumentError, FileError

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
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def file_error(verb: str, path: str, exc: OSError) -> FileError:
    """One line for an OSError on ``path`` (the user's path, never a temporary file)."""
    reason = _HINTS.get(exc.errno or 0) or (exc.strerror or str(exc)).lower()
    return FileError(f"cannot {verb} {path}: {reason}", path=path)


def kind_of(mode: int) -> str | None:
    """What a path that is not a regular file is ("a folder", "a FIFO (named pipe)", ...); None for one."""
    return None if stat.S_ISREG(mode) else next((n for test, n in _KINDS if test(mode)), "a special file")


def as_path(path: object) -> str:
    """``path`` as text, or BadArgumentError when it is no path at all (a number, None)."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise BadArgumentError(f"a file path must be text or a pathlib.Path, got {path!r}")
    return os.fsdecode(path)


def check_target(path: str | os.PathLike) -> tuple[str, str, os.stat_result | None]:
    """(the user's path, the real path to write, what is there now) or FileError."""
    text = as_path(path)
    if not text:
        raise FileError("cannot write '': the path is empty; give a file name", path=text)
    real = os.path.realpath(text)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise file_error("write", text, exc) from exc
    if st is not None and (what := kind_of(st.st_mode)):
        hint = "give a file name" if what == "a folder" else "nbgpu never replaces one, give another path"
        raise FileError(f"cannot write {text}: it is {what}; {hint}", path=text)
    if not os.path.isdir(os.path.dirname(real)):
        raise FileError(f"cannot write {text}: folder {os.path.dirname(real)} does not exist; "
                        "create it first", path=text)
    return text, real, st


def _open_new(real: str, existing: os.stat_result | None) -> tuple[int, str, int]:
    """A new temporary file beside ``real`` (owner read/write while written) and its final mode."""
    folder, name = os.path.split(real)
    while True:
        tmp = os.path.join(folder, f".{name}.nbgpu-{secrets.token_hex(4)}.tmp")
        with contextlib.suppress(FileExistsError):  # a name taken: draw another
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            break
    mode = stat.S_IMODE(existing.st_mode if existing is not None else os.fstat(fd).st_mode)
    os.fchmod(fd, 0o600)
    if existing is not None and hasattr(os, "geteuid") and os.geteuid() == 0:
        with contextlib.suppress(OSError):
            os.fchown(fd, existing.st_uid, existing.st_gid)
    return fd, tmp, mode


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "w") -> Iterator[IO]:
    """Yield an open temporary file; on success it replaces ``path`` (through a symlink)."""
    text, real, existing = check_target(path)
    try:
        fd, tmp, final_mode = _open_new(real, existing)
    except OSError as exc:
        raise file_error("write", text, exc) from exc
    kw = {} if "b" in mode else {"encoding": "utf-8", "newline": ""}
    try:
        with open(fd, mode, **kw) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, final_mode)
        os.replace(tmp, real)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise file_error("write", text, exc) from exc
        raise


def write_whole(fd: int, data: bytes, path: str, size: int) -> None:
    """Write ``data`` whole to ``fd``; on failure cut the file back to ``size`` bytes and raise FileError."""
    done = 0
    try:
        while done < len(data):
            done += os.write(fd, data[done:])
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise file_error("write", path, exc) from exc


class LineFile:
    """A file written in place line by line, each line handed whole to the OS."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path, real, _ = check_target(path)
        try:
            self._fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        except OSError as exc:
            raise file_error("write", self.path, exc) from exc
        self.size = 0

    def write(self, line: str) -> None:
        """Append ``line`` (without its newline), whole or not at all."""
        data = (line + "\n").encode("utf-8")
        write_whole(self._fd, data, self.path, self.size)
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


def iso(t: float, timespec: str = "auto") -> str:
    """Epoch seconds as ISO 8601 UTC text."""
    return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec=timespec)


def json_value(v: object) -> object:
    """``v`` as a JSON scalar: numpy scalars unwrapped, NaN and infinities None, anything else text."""
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def jsonl_record(timestamp: str, gpu: object, values: Mapping[str, object]) -> dict:
    """One JSON-lines record: ``timestamp``, ``gpu_id``, the script's keys, then nbgpu's columns."""
    rec: dict = {"timestamp": timestamp, "gpu_id": json_value(gpu)}
    for key, (col, scale) in LEGACY_KEYS.items():
        if col in values:
            v = json_value(values[col])
            rec[key] = None if v is None else round(v * scale, 6)
    for col, v in values.items():
        if col not in ("time", "gpu"):
            rec[col] = json_value(v)
    return rec


def json_line(record: Mapping[str, object]) -> str:
    """A record as one line of strict JSON (no NaN)."""
    return json.dumps(record, default=str, allow_nan=False)


def write_jsonl(df: pd.DataFrame, path: str, filled: bool = True) -> str:
    """Write ``df`` as JSON lines, atomically (``filled``: each GPU's latest values repeated); the path."""
    if filled and len(df):
        value_cols = [c for c in df.columns if c not in ("time", "gpu", "decimated")]
        df = df.assign(**df.groupby("gpu", sort=False)[value_cols].ffill())
    with atomic_file(path) as fh:
        for row in df.to_dict("records"):
            fh.write(json_line(jsonl_record(row["time"].isoformat(), row["gpu"], row)) + "\n")
    return os.fspath(path)


def write_csv(df: pd.DataFrame, path: str) -> str:
    """Write ``df`` as CSV with ISO 8601 UTC times, atomically; returns the path."""
    with atomic_file(path) as fh:
        df.assign(time=df["time"].map(lambda t: t.isoformat())).to_csv(fh, index=False, lineterminator="\n")
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
