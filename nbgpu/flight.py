"""A crash-safe flight recorder: a fixed-size ring file per kernel, read after it died.

Each kernel writes one record a second into slot ``seq % N`` of its ring with
``os.pwrite``; every slot carries a sequence number and a CRC32, so a kill at any instant
leaves a readable file of fixed size. The next ``%load_ext nbgpu`` (or ``nbgpu
postmortem``) finds rings of kernels that are gone without closing them and says why
they likely died. GPU faults (NVML's XID events, which the sampler's thread polls) reach
the ring in the next second's record; every record carries the kernel's newest ones.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import re
import socket
import sys
import threading
import time
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path

from .version import __version__

HEADER = 4096
SLOT = 1024
SLOTS = 600
FSYNC_EVERY_S = 5.0
EVERY_S = 1.0  # one record a second...
NEAR_EVERY_S = 0.25  # ...four while memory is past NEAR_LIMIT of host RAM or the cgroup's limit
NEAR_LIMIT = 0.8
GPU_VALUES = ("mem_used_bytes", "util_pct", "power_w", "temp_c", "clock_event_reasons")
_NONE = (None, None)
XIDS_KEPT = 4  # the newest GPU faults, in every record (older ones are in older records)


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


def _pack(obj: dict, size: int) -> bytes:
    """One slot: CRC, JSON, padding. Too long, it keeps 2 GPUs, then drops the cell's line."""
    body = json.dumps(obj, separators=(",", ":")).encode()
    for cut in ({"gpus": obj.get("gpus", [])[:2]}, {"cell": None}):
        if len(body) <= size - 10:
            break
        obj = dict(obj, **cut)
        body = json.dumps(obj, separators=(",", ":")).encode()
    body = body[: size - 10]
    return b"%08x " % zlib.crc32(body) + body.ljust(size - 10) + b"\n"


def _unpack(raw: bytes) -> dict | None:
    """The slot's object, or None if torn, empty or corrupt."""
    try:
        crc, body = int(raw[:8], 16), raw[9:-1].rstrip(b" ")
        if zlib.crc32(body) != crc:
            return None
        out = json.loads(body)
        return out if isinstance(out, dict) else None
    except (ValueError, UnicodeDecodeError):
        return None


# -- readings ----------------------------------------------------------------------------
class _Kept:
    """Files read once a second (/proc, the cgroup's): opened once, each read one ``pread``."""

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def read(self, path: str | None) -> bytes | None:
        """The file's text now; None where it cannot be read (never retried once missing)."""
        if not path:
            return None
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                fd = -1
            self._fds[path] = fd
        if fd < 0:
            return None
        try:
            return os.pread(fd, 8192, 0)
        except OSError:
            return None

    def close(self) -> None:
        for fd in self._fds.values():
            if fd >= 0:
                os.close(fd)
        self._fds.clear()


_MEMINFO = (b"MemTotal", b"MemAvailable", b"SwapTotal", b"SwapFree")
_MEMINFO_LINE = re.compile(rb"^(MemTotal|MemAvailable|SwapTotal|SwapFree):\s+(\d+)", re.M)


def _meminfo(text: bytes | None) -> dict[bytes, int]:
    """Bytes of the ``_MEMINFO`` fields of /proc/meminfo's text (kB there)."""
    return {key: int(kb) * 1024 for key, kb in _MEMINFO_LINE.findall(text or b"")}


def _int(text: bytes | None, index: int = 0) -> int | None:
    try:
        return int(text.split()[index]) if text else None
    except (ValueError, IndexError):
        return None


def _oom_kill(text: bytes | None) -> int | None:
    """The ``oom_kill`` count of a cgroup's events text (v2 memory.events, v1 memory.oom_control)."""
    for line in (text or b"").split(b"\n"):
        if line.startswith(b"oom_kill "):
            return _int(line, 1)
    return None


UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a number near 2**63


def memory_cgroup(proc_cgroup: str = "/proc/self/cgroup") -> tuple[str, str, str] | None:
    """(limit, usage, events) files of this process's memory cgroup, v2 or v1; None if none.

    The events file (v2 ``memory.events``, v1 ``memory.oom_control``) has the ``oom_kill`` count.
    """
    try:
        with open(proc_cgroup) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        hid, controllers, path = [*line.split(":", 2), "", ""][:3]
        path = path.rstrip("/")
        if "memory" in controllers.split(","):
            d = "/sys/fs/cgroup/memory" + path
            if os.path.exists(d + "/memory.limit_in_bytes"):
                return d + "/memory.limit_in_bytes", d + "/memory.usage_in_bytes", d + "/memory.oom_control"
        elif hid == "0":
            for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                d = root + path
                if os.path.exists(d + "/memory.max"):
                    return d + "/memory.max", d + "/memory.current", d + "/memory.events"
    return None


def oom_kills(path: str | None) -> int | None:
    """The cgroup's ``oom_kill`` counter read now, or None where unreadable."""
    try:
        with open(path or "", "rb") as f:
            return _oom_kill(f.read())
    except OSError:
        return None


def _from_sampler(cursor: list) -> tuple[list[list[float | None]], list[list]]:
    """[used, total, util, power, temp, clock-event reasons] of every GPU of a running shared
    sampler (never starts NVML), and its XID events newer than ``cursor`` ([store ref, seq],
    advanced)."""
    from . import session

    s = session.shared_sampler()
    if s is None:
        return [], []
    store = s.store
    if cursor[0] is None or cursor[0]() is not store:
        cursor[:] = [weakref.ref(store), 0]
    new = store.events_since(cursor[1])
    if new:
        cursor[1] = new[-1].seq
    xids = [[round(e.time, 3), e.device, e.extra.get("code")] for e in new if e.kind == "xid"]
    if not getattr(s, "running", False):
        return [], xids
    out: list[list[float | None]] = []
    for dev in s.devices:  # the store's newest values: a read that changes nothing in the sampler
        newest = store.last_many(dev.key)
        vals = [newest.get(k, _NONE)[1] for k in GPU_VALUES]
        vals.insert(1, dev.mem_total_bytes)
        out.append([None if v is None or v != v else round(float(v), 1) for v in vals])
    return out, xids


class Recorder:
    """One kernel's ring: ``write()`` a record, ``close()`` marks it closed."""

    def __init__(self, directory: Path | None = None, slots: int = SLOTS,
                 clock: Callable[[], float] = time.time) -> None:
        self.pid = os.getpid()
        self.started = start_time(self.pid) or int(time.time())
        self.slots = slots
        self.seq = 0
        self.cell: list | None = None
        self.xids: list[list] = []  # [time, gpu, code] of the newest GPU faults
        self._cursor: list = [None, 0]  # how far the shared sampler's events were read
        self._clock = clock
        self.cgroup = memory_cgroup()
        self._kept = _Kept()
        self._page = os.sysconf("SC_PAGE_SIZE")
        self.header = {"pid": self.pid, "start": self.started, "host": socket.gethostname(),
                       "python": sys.version.split()[0], "nbgpu": __version__, "slots": slots,
                       "began": clock(), "closed": False, "reported": False,
                       "cg_events": self.cgroup[2] if self.cgroup else None}
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
        self._cpu = (time.monotonic(), sum(os.times()[:2]))

    def reading(self) -> dict:
        """One record of the host, this process, its cgroup, the GPUs and the running cell."""
        kept = self._kept
        m = _meminfo(kept.read("/proc/meminfo"))
        now, cpu = time.monotonic(), sum(os.times()[:2])
        pct = 100.0 * (cpu - self._cpu[1]) / max(now - self._cpu[0], 1e-6)
        self._cpu = (now, cpu)
        pages = _int(kept.read("/proc/self/statm"), 1)
        rss = pages * self._page if pages is not None else None
        total, avail = m.get(b"MemTotal"), m.get(b"MemAvailable")
        try:
            gpus, xids = _from_sampler(self._cursor)
        except Exception:
            gpus, xids = [], []
        if xids:
            self.xids = (self.xids + xids)[-XIDS_KEPT:]
        out = {"t": self._clock(), "ram_total": total, "ram_avail": avail,
                "ram_used": total - avail if total and avail is not None else None,
                "swap_used": m[b"SwapTotal"] - m[b"SwapFree"] if len(m) == len(_MEMINFO) else None,
                "rss": rss, "cpu": round(pct, 1),
                "gpus": gpus, "cell": self.cell}
        if self.cgroup:
            cg_max = _int(kept.read(self.cgroup[0]))  # v2 "max" reads None: no limit
            out.update(cg_max=cg_max if cg_max and cg_max < UNLIMITED else None,
                       cg_cur=_int(kept.read(self.cgroup[1])), cg_oom=_oom_kill(kept.read(self.cgroup[2])))
        if self.xids:
            out["xid"] = self.xids
        return out

    def write(self, record: dict | None = None) -> None:
        """Write one record into the next slot; fsync at most every 5 s (OSError if it fails)."""
        rec = dict(record if record is not None else self.reading(), seq=self.seq)
        os.pwrite(self.fd, _pack(rec, SLOT), HEADER + (self.seq % self.slots) * SLOT)
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
        self._kept.close()


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


def _loop(rec: Recorder) -> None:
    wait = EVERY_S
    while not _stop.wait(wait):
        wait = EVERY_S
        try:
            record = rec.reading()
            rec.write(record)
            if near_limit(record):  # the last seconds before an OOM kill, 4 records a second
                wait = NEAR_EVERY_S
        except OSError as exc:
            _warn(exc)
            return
        except Exception:  # a reading failed: skip this second
            continue


def _pre(info) -> None:
    if _rec is not None:
        raw = getattr(info, "raw_cell", "") or ""
        first = next((ln.strip() for ln in raw.splitlines() if ln.strip()), "")[:120]
        shell = _shell()
        count = getattr(shell, "execution_count", None) if shell is not None else None
        if count is not None and getattr(info, "store_history", False):
            count -= 1  # IPython counts the cell before it triggers pre_run_cell
        _rec.cell = [count, first, time.time(), getattr(info, "cell_id", None)]


def _post(result) -> None:
    if _rec is not None:
        _rec.cell = None


def _shell():
    try:
        from IPython import get_ipython

        return get_ipython()
    except ImportError:  # pragma: no cover
        return None


def start(shell=None) -> Recorder | None:
    """Start the 1 Hz recorder thread (once); None, with one warning, if the ring cannot be made."""
    global _rec, _thread
    if _rec is not None:
        return _rec
    try:
        _rec = Recorder()
        _rec.write()
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
    """Stop the thread and mark the ring closed (``%unload_ext``, kernel exit)."""
    global _rec, _thread
    _stop.set()
    if _thread is not None:
        _thread.join(timeout=3)
        _thread = None
    if _rec is not None:
        _rec.close()
        _rec = None
    if shell is not None:
        for name, fn in (("pre_run_cell", _pre), ("post_run_cell", _post)):
            try:
                shell.events.unregister(name, fn)
            except ValueError:
                pass


def on_load(shell) -> None:
    """``%load_ext nbgpu``: print each dead kernel's post-mortem once, then start recording.

    With ``NbGpu.flight_recorder`` off, nothing is read or written.
    """
    from .config import register
    from .postmortem import report_at_load

    if not register(shell).flight_recorder:
        return
    try:
        for line in report_at_load():
            print(line)
    except Exception as exc:  # a post-mortem must never break the extension
        print(f"nbgpu: could not read old flight records: {exc}", file=sys.stderr)
    start(shell)
