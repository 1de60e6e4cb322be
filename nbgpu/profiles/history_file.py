"""The persistent history file: JSON lines, appended under a lock, read line by line."""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import stat
from collections.abc import Iterator

from ..errors import FileError
from ..files import atomic_file, file_error, kind_of, write_whole
from ..units import as_float

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NUMBERS = ("duration_s", "alerts")
_TYPES = {"execution_count": int, "gpus": list, "totals": dict, "figures": dict,
          **dict.fromkeys(("cell_id", "first_line", "source_hash", "status", "error", "alert_rules"), str)}


def check_path(path: str) -> None:
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
        fd = os.open(path, flags | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC, 0o666)
    except OSError as exc:
        check_path(path)  # a symlink (ELOOP) or FIFO swapped in: say so
        raise file_error("use", path, exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        check_path(path)
        raise FileError(f"cannot keep history in {path}: not a regular file", path=path)
    os.set_blocking(fd, True)
    return fd


@contextlib.contextmanager
def locked(path: str, shared: bool = False) -> Iterator[None]:
    """Hold the lock of the history file ``path`` (shared for reading, exclusive for writing)."""
    folder, name = os.path.split(path)
    lock = os.path.join(folder, f".{name}.lock")
    fd = -1
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o666)
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


def valid_record(data: dict) -> bool:
    """Whether a version-1 record has the types ``history()`` relies on."""
    def number(v: object) -> bool:
        return math.isfinite(as_float(v))

    return (number(data.get("start")) and all(data.get(k) is None or number(data[k]) for k in _NUMBERS)
            and all(data.get(k) is None or isinstance(data[k], kind) for k, kind in _TYPES.items())
            and not isinstance(data.get("execution_count"), bool)
            and all(isinstance(g, dict) for g in data.get("gpus") or ()))


def parse(raw: bytes) -> tuple[str, dict | None]:
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
    return ("record", data) if valid_record(data) else ("bad", None)


def _read_bytes(path: str) -> list[bytes]:
    try:
        fd = _open(path, os.O_RDONLY)
    except FileError:
        if not os.path.lexists(path):
            return []
        raise
    with os.fdopen(fd, "rb") as fh:
        return fh.read().splitlines()


def read(path: str) -> tuple[list[dict], int]:
    """The valid records of ``path`` in file order and how many bad lines were skipped."""
    with locked(path, shared=True):
        lines = _read_bytes(path)
    parsed = [parse(raw) for raw in lines]
    return [data for kind, data in parsed if kind == "record"], sum(kind == "bad" for kind, _ in parsed)


def append(path: str, lines: list[str], keep: int) -> None:
    """Append ``lines`` under the lock; past ``keep`` * 1.5 records, drop the oldest records
    (never a line nbgpu does not understand)."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    with locked(path):
        fd = _open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:  # a full disk: cut back to the last whole line (we hold the lock)
            write_whole(fd, data, path, os.fstat(fd).st_size)
            size = os.fstat(fd).st_size
        finally:
            os.close(fd)
        if size > 2048 * keep:  # cheap first test before counting the records
            _compact(path, keep)


def _compact(path: str, keep: int) -> None:
    lines = _read_bytes(path)
    records = [i for i, raw in enumerate(lines) if parse(raw)[0] == "record"]
    if len(records) <= keep + keep // 2:
        return
    gone = set(records[:len(records) - keep])  # the oldest records, never another line
    with atomic_file(path, "wb") as fh:
        fh.writelines(raw + b"\n" for i, raw in enumerate(lines) if i not in gone)
