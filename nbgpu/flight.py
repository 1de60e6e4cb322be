"""A crash-safe flight recorder: each kernel ``os.pwrite``s a record a second into slot ``seq % N``
of its fixed-size ring file, each slot with a sequence number and a CRC32, so a kill at any instant
leaves a readable file; ``postmortem`` reads the rings of kernels gone without closing them."""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import math
import os
import socket
import struct
import sys
import threading
import time
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path

from .flight_reads import Readings
from .version import __version__

HEADER = 4096
SLOT = 1024
SLOTS = 600
FSYNC_EVERY_S = 30.0  # a killed kernel's writes are in the page cache; fsync guards a machine crash
EVERY_S = 1.0  # one record a second...
NEAR_EVERY_S = 0.25  # ...four while memory is past NEAR_LIMIT of host RAM or the cgroup's limit
NEAR_LIMIT = 0.8
STALL_S = 10.0  # while a sampler's ticks write the records, the recorder's thread wakes only when
# they are this overdue (each wake-up costs CPU; a stalled sampler loses at most these seconds)
EARLY_S = 0.1  # a record at a sampler's tick may come this much before its second is up


def cache_dir() -> Path:
    """``$XDG_CACHE_HOME/nbgpu`` else ``~/.cache/nbgpu``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "nbgpu"


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (None if it is gone or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
        return None if rest[0] == b"Z" else int(rest[19])
    except (OSError, IndexError, ValueError):
        return None


_JSON = json.JSONEncoder(separators=(",", ":"))  # made once: a second's record is cold work


def _slot(body: bytes, size: int) -> bytes:
    """A slot of ``size`` bytes: CRC in hex, a space, ``body``, padding, a newline."""
    return b"%08x " % zlib.crc32(body) + body.ljust(size - 10) + b"\n"


def _pack(obj: dict, size: int) -> bytes:
    """The header's slot (JSON)."""
    return _slot(_JSON.encode(obj).encode()[: size - 10], size)


# A record's slot: CRC in hex, a space, then its numbers in a fixed binary layout and the cell and
# GPU faults as JSON (encoded again only when they change). Packing JSON numbers cold took a third
# of a record's CPU.
_REC = struct.Struct("<BHq9dB")  # marker, length, seq, the HOST figures, GPU count
_GPU = struct.Struct("<6d")  # used, total, util, power, temp, clock-event reasons
_HOST = ("t", "ram_total", "ram_avail", "swap_used", "rss", "cpu", "cg_max", "cg_cur", "cg_oom")
_BYTES = frozenset({"ram_total", "ram_avail", "swap_used", "rss", "cg_max", "cg_cur", "cg_oom"})
_MARK = 1
_NAN = float("nan")


def _num(v) -> float:
    return _NAN if v is None else v


def _pack_record(rec: dict, tail: bytes, size: int) -> bytes:
    """One record's slot; past the slot it keeps 2 GPUs, then drops the cell and faults."""
    gpus = rec.get("gpus") or []
    for keep, tail_kept in ((len(gpus), tail), (2, tail), (2, b"[]")):
        n = min(len(gpus), keep)
        length = _REC.size + n * _GPU.size + len(tail_kept)
        if length <= size - 10:
            break
    return _slot(b"".join([_REC.pack(_MARK, length, rec["seq"], *(_num(rec.get(k)) for k in _HOST), n),
                           *(_GPU.pack(*map(_num, g)) for g in gpus[:n]), tail_kept]), size)


def _from_binary(body: bytes) -> dict:
    _, length, seq, *host, n = _REC.unpack_from(body)
    out: dict = {k: None if v != v else int(v) if k in _BYTES else v
                 for k, v in zip(_HOST, host, strict=True)}
    out["seq"] = seq
    out["ram_used"] = (out["ram_total"] - out["ram_avail"]
                       if out["ram_total"] and out["ram_avail"] is not None else None)
    out["gpus"] = [[None if v != v else v for v in _GPU.unpack_from(body, _REC.size + i * _GPU.size)]
                   for i in range(n)]
    cell, xid = json.loads(body[_REC.size + n * _GPU.size:length]) or [None, None]
    out["cell"] = cell
    if xid:
        out["xid"] = xid
    return out


def _unpack(raw: bytes) -> dict | None:
    """The slot's object (a header, or a record in either layout), or None if torn, empty or corrupt."""
    try:
        crc = int(raw[:8], 16)
        if raw[9] == _MARK:
            body = raw[9:9 + _REC.unpack_from(raw, 9)[1]]
            return _from_binary(body) if zlib.crc32(body) == crc else None
        body = raw[9:-1].rstrip(b" ")
        if zlib.crc32(body) != crc:
            return None
        out = json.loads(body)
        return out if isinstance(out, dict) else None
    except (ValueError, UnicodeDecodeError, IndexError, struct.error):
        return None


class Recorder:
    """One kernel's ring: ``write()`` a record, ``close()`` marks it closed."""

    def __init__(self, directory: Path | None = None, slots: int = SLOTS,
                 clock: Callable[[], float] = time.time) -> None:
        self.pid = os.getpid()
        self.started = start_time(self.pid) or int(time.time())
        self.slots = slots
        self.seq = 0
        self.cell: list | None = None
        self._clock = clock
        self.readings = Readings(clock)
        cgroup = self.readings.cgroup
        self.header = {"pid": self.pid, "start": self.started, "host": socket.gethostname(),
                       "python": sys.version.split()[0], "nbgpu": __version__, "slots": slots,
                       "began": clock(), "closed": False, "reported": False,
                       "cg_events": cgroup[2] if cgroup else None}
        d = directory or cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        self.path = d / f"flight-{self.header['host']}-{self.pid}-{self.started}.ring"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:  # its whole size now: a full disk shows here, and the file never grows
            os.posix_fallocate(self.fd, 0, HEADER + slots * SLOT)
            os.pwrite(self.fd, _pack(self.header, HEADER), 0)
        except OSError:
            os.close(self.fd)
            self.path.unlink(missing_ok=True)
            raise
        self._last_sync = -FSYNC_EVERY_S
        self._lock = threading.Lock()  # records come from the recorder's thread or a sampler's
        self.monotonic = time.monotonic  # paces the records (a test may give a fake clock)
        self.last_at = -math.inf  # self.monotonic() of the newest record
        self.near = False  # whether the newest record was near a memory limit
        self._tail: tuple = (None, None, b"[]")  # the cell and faults as last packed

    def due(self, now: float) -> bool:
        """Whether a record is due at ``now`` (``self.monotonic()``)."""
        return now - self.last_at >= (NEAR_EVERY_S if self.near else EVERY_S) - EARLY_S

    def record(self, sampler=None, tick: float | None = None) -> bool:
        """Read and write one record unless another thread is writing one (at ``sampler``'s tick
        ``tick``, with what that tick read); whether it wrote."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            record = self.readings.read(self.cell, sampler, tick)
            self.write(record)
            self.last_at = self.monotonic()
            self.near = near_limit(record)
            return True
        finally:
            self._lock.release()

    def write(self, record: dict | None = None) -> None:
        """Write one record into the next slot; fsync at most every ``FSYNC_EVERY_S`` (OSError on failure)."""
        rec = dict(record if record is not None else self.readings.read(self.cell), seq=self.seq)
        cell, xid = rec.get("cell"), rec.get("xid")
        if self._tail[0] is not cell or self._tail[1] is not xid:  # a new cell or a new fault
            self._tail = (cell, xid, _JSON.encode([cell, xid] if cell or xid else []).encode())
        os.pwrite(self.fd, _pack_record(rec, self._tail[2], SLOT), HEADER + (self.seq % self.slots) * SLOT)
        self.seq += 1
        now = self._clock()
        if not 0 <= now - self._last_sync < FSYNC_EVERY_S:
            os.fsync(self.fd)
            self._last_sync = now

    def close(self) -> None:
        """Mark the ring closed (a clean stop: nothing to report)."""
        if self.fd < 0:
            return
        try:
            os.pwrite(self.fd, _pack(dict(self.header, closed=True), HEADER), 0)
            os.fsync(self.fd)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = -1
        self.readings.close()


def read_ring(path: Path) -> tuple[dict, list[dict]] | None:
    """(header, records by sequence) of a ring; None if its header is unreadable."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    header = _unpack(data[:HEADER])
    if header is None:
        return None
    recs = [r for i in range(HEADER, len(data) - SLOT + 1, SLOT)
            if (r := _unpack(data[i:i + SLOT])) is not None and isinstance(r.get("seq"), int)]
    return header, sorted(recs, key=lambda r: r["seq"])


def set_flag(path: Path, **flags: bool) -> dict | None:
    """Rewrite a ring's header with ``flags`` set (e.g. ``reported=True``) under an exclusive
    lock; the header as it was before, None if unreadable."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # two kernels loading at once: one reads, then the other
        header = _unpack(os.pread(fd, HEADER, 0))
        if header is not None:
            os.pwrite(fd, _pack(dict(header, **flags), HEADER), 0)
        return header
    finally:
        os.close(fd)


def is_dead(header: dict) -> bool:
    """True if the ring's process is gone (or its pid now belongs to another process)."""
    if header.get("host") != socket.gethostname():
        return False  # another machine's ring: its process cannot be checked from here
    return start_time(int(header.get("pid", -1))) != header.get("start")


# -- the recorder thread -------------------------------------------------------------------
_rec: Recorder | None = None
_stop = threading.Event()
_thread: threading.Thread | None = None
_fed_by: weakref.ref | None = None  # the sampler whose ticks write records
_shell_of_load: weakref.ref | None = None  # the shell that loaded the extension
_warned = False


def _warn(exc: BaseException) -> None:
    global _warned
    if not _warned:
        _warned = True
        print(f"nbgpu: cannot keep a flight record in {cache_dir()} ({exc.__class__.__name__}: "
              f"{exc}); everything else works.", file=sys.stderr)


def near_limit(record: dict) -> bool:
    """Whether host RAM or the cgroup is past ``NEAR_LIMIT`` of its size in ``record``."""
    cmax, ccur = record.get("cg_max"), record.get("cg_cur")
    total, used = record.get("ram_total"), record.get("ram_used")
    return bool((cmax and ccur is not None and ccur >= NEAR_LIMIT * cmax)
                or (total and used is not None and used >= NEAR_LIMIT * total))


def _on_tick(sampler, now: float) -> None:
    """A listener of the shared sampler: its thread, awake anyway, writes the record when due
    (no wake-up of the recorder's own thread each second)."""
    rec = _rec
    if rec is None or not rec.due(rec.monotonic()):
        return
    try:
        rec.record(sampler, now)
    except OSError as exc:
        _warn(exc)
        stop()
    except Exception:  # a reading failed: skip this second, as the recorder's thread does
        pass


def _follow(s) -> None:
    """Listen to sampler ``s``'s ticks (None: to none's), and to no other's."""
    global _fed_by
    old = _fed_by() if _fed_by is not None else None
    if old is not s:
        if old is not None:
            old.remove_listener(_on_tick)
        if s is not None:
            s.add_listener(_on_tick)
    _fed_by = weakref.ref(s) if s is not None else None


def _follow_sampler() -> bool:
    """Follow the shared sampler while it runs at least once a second; whether one is followed now."""
    from . import session

    s = session.shared_sampler()
    s = s if s is not None and s.running and s.interval <= EVERY_S else None
    _follow(s)
    return s is not None


def _next_wait(rec: Recorder, following: bool, stalled: bool) -> float:
    """Seconds until the recorder's thread looks again: a quarter second near a memory limit
    (the last seconds before an OOM kill), until the ticks' records would be ``STALL_S`` overdue
    while a sampler's ticks write them, else until the next record is due."""
    if rec.near:
        return NEAR_EVERY_S
    due_in = (STALL_S if following and not stalled else EVERY_S) - (rec.monotonic() - rec.last_at)
    return max(0.01, due_in)


def _loop(rec: Recorder) -> None:
    """Write the records no sampler's tick writes: all of them while none is followed, the
    quarter-second ones near a memory limit, and those of a stalled sampler."""
    try:
        following = _follow_sampler()
    except Exception:
        following = False
    mine = -1  # ``rec.seq`` after this thread's newest record: unchanged, no tick wrote since
    while not _stop.wait(_next_wait(rec, following, rec.seq == mine)):
        try:
            following = _follow_sampler()
            now = rec.monotonic()
            stalled = rec.seq == mine or now - rec.last_at >= STALL_S - EARLY_S
            if rec.due(now) and (rec.near or not following or stalled) and rec.record():
                mine = rec.seq
        except OSError as exc:
            _warn(exc)
            return
        except Exception:  # a reading failed: skip this second
            pass


def _pre(info) -> None:
    if _rec is not None:
        raw = getattr(info, "raw_cell", "") or ""
        first = next((ln.strip() for ln in raw.splitlines() if ln.strip()), "")[:120]
        shell = _shell_of_load() if _shell_of_load is not None else None  # the one _pre is registered with
        count = getattr(shell, "execution_count", None)
        if count is not None and getattr(info, "store_history", False):
            count -= 1  # IPython counts the cell before it triggers pre_run_cell
        _rec.cell = [count, first, time.time(), getattr(info, "cell_id", None)]


def _post(result) -> None:
    if _rec is not None:
        _rec.cell = None


def start(shell=None) -> Recorder | None:
    """Start the 1 Hz recorder thread (once); None, with one warning, if the ring cannot be made."""
    global _rec, _thread
    if _rec is not None:
        return _rec
    try:
        _rec = Recorder()
        _rec.record()
    except OSError as exc:
        _warn(exc)
        _rec = None
        return None
    _stop.clear()
    _thread = threading.Thread(target=_loop, args=(_rec,), name="nbgpu-flight", daemon=True)
    _thread.start()
    if shell is not None:
        shell.events.register("pre_run_cell", _pre)
        shell.events.register("post_run_cell", _post)
    atexit.register(stop)
    return _rec


def stop(shell=None) -> None:
    """Stop recording and mark the ring closed (``%unload_ext``, ``%gpumon stop``, kernel exit)."""
    global _rec, _thread
    _stop.set()
    if _thread is not None and _thread is not threading.current_thread():
        _thread.join(timeout=3)
    _thread = None
    _follow(None)
    if _rec is not None:
        _rec.close()
        _rec = None
    if shell is not None:
        for name, fn in (("pre_run_cell", _pre), ("post_run_cell", _post)):
            with contextlib.suppress(ValueError):
                shell.events.unregister(name, fn)


def resume() -> None:
    """Record again (``%gpumon`` after a ``%gpumon stop``) where the extension is loaded and
    ``NbGpu.flight_recorder`` is on."""
    shell = _shell_of_load() if _shell_of_load is not None else None
    if _rec is None and shell is not None:
        from .config import register

        if register(shell).flight_recorder:
            start(shell)


def on_load(shell) -> None:
    """``%load_ext nbgpu``: print each dead kernel's post-mortem once, then start recording
    (with ``NbGpu.flight_recorder`` off, nothing is read or written)."""
    from .config import register
    from .postmortem import report_at_load

    global _shell_of_load
    _shell_of_load = weakref.ref(shell)
    if not register(shell).flight_recorder:
        return
    try:
        for line in report_at_load():
            print(line)
    except Exception as exc:  # a post-mortem must never break the extension
        print(f"nbgpu: could not read old flight records: {exc}", file=sys.stderr)
    start(shell)


def on_unload(shell) -> None:
    """``%unload_ext nbgpu``: stop recording (the ring is marked closed); ``%gpumon`` does not resume it."""
    global _shell_of_load
    _shell_of_load = None
    stop(shell)
