"""A crash-safe flight recorder: a fixed-size ring file per kernel, read after it died.

Each kernel writes one record a second into slot ``seq % N`` of its ring with
``os.pwrite``; every slot carries a sequence number and a CRC32, so a kill at any instant
leaves a readable file of fixed size. The next ``%load_ext nbgpu`` (or ``nbgpu
postmortem``) finds rings of kernels that are gone without closing them and says why
they likely died. XID events are not recorded.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading
import time
import zlib
from pathlib import Path

HEADER = 4096
SLOT = 1024
SLOTS = 600
GIB = 1024 ** 3


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
    body = json.dumps(obj, separators=(",", ":")).encode()
    if len(body) > size - 10:
        obj = dict(obj, gpus=obj.get("gpus", [])[:2], cell=None)
        body = json.dumps(obj, separators=(",", ":")).encode()[: size - 10]
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
def _meminfo() -> dict[str, int]:
    out: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                k, v = line.split(":", 1)
                out[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return out


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text)
    except (OSError, ValueError):
        return None


def _read_field(path: str, index: int) -> int | None:
    try:
        with open(path) as f:
            return int(f.read().split()[index])
    except (OSError, ValueError, IndexError):
        return None


def oom_kills(path: str = "/sys/fs/cgroup/memory.events") -> int | None:
    """The cgroup's ``oom_kill`` counter, or None where unreadable."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _gpus() -> list[list[float | None]]:
    """[used, total, util, power, temp] of every GPU of a running sampler (never starts NVML)."""
    from . import session

    s = session.shared_sampler()
    if s is None or not getattr(s, "running", False):
        return []
    out: list[list[float | None]] = []
    rows = s.latest()
    for row in rows:
        vals = [row.get(k) for k in ("mem_used_bytes", "mem_total_bytes", "util_pct", "power_w", "temp_c")]
        out.append([None if v is None or v != v else float(v) for v in vals])
    return out


class Recorder:
    """One kernel's ring: ``write()`` a record, ``close()`` marks it closed."""

    def __init__(self, directory: Path | None = None, slots: int = SLOTS) -> None:
        self.pid = os.getpid()
        self.started = start_time(self.pid) or int(time.time())
        self.slots = slots
        self.seq = 0
        self.cell: list | None = None
        self.header = {"pid": self.pid, "start": self.started, "host": socket.gethostname(),
                       "python": sys.version.split()[0], "nbgpu": _version(), "slots": slots,
                       "began": time.time(), "closed": False, "reported": False}
        d = directory or cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        self.path = d / f"flight-{self.header['host']}-{self.pid}-{self.started}.ring"
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.pwrite(self.fd, _pack(self.header, HEADER), 0)
        self._last_sync = 0.0
        self._cpu = (time.monotonic(), sum(os.times()[:2]))

    def reading(self) -> dict:
        """One record of the host, this process, its cgroup, the GPUs and the running cell."""
        m = _meminfo()
        now, cpu = time.monotonic(), sum(os.times()[:2])
        pct = 100.0 * (cpu - self._cpu[1]) / max(now - self._cpu[0], 1e-6)
        self._cpu = (now, cpu)
        pages = _read_field("/proc/self/statm", 1)
        rss = pages * os.sysconf("SC_PAGE_SIZE") if pages is not None else None
        total, avail = m.get("MemTotal"), m.get("MemAvailable")
        try:
            gpus = _gpus()
        except Exception:
            gpus = []
        return {"t": time.time(), "ram_total": total, "ram_avail": avail,
                "ram_used": total - avail if total and avail is not None else None,
                "swap_used": m["SwapTotal"] - m["SwapFree"] if "SwapFree" in m else None,
                "rss": rss, "cpu": round(pct, 1),
                "cg_max": _read_int("/sys/fs/cgroup/memory.max"),
                "cg_cur": _read_int("/sys/fs/cgroup/memory.current"),
                "cg_oom": oom_kills(), "gpus": gpus, "cell": self.cell}

    def write(self, record: dict | None = None) -> None:
        """Write one record into the next slot; fsync at most every 5 s (OSError if it fails)."""
        rec = dict(record if record is not None else self.reading(), seq=self.seq)
        os.pwrite(self.fd, _pack(rec, SLOT), HEADER + (self.seq % self.slots) * SLOT)
        self.seq += 1
        if time.monotonic() - self._last_sync >= 5.0:
            os.fsync(self.fd)
            self._last_sync = time.monotonic()

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


def _version() -> str:
    from .version import __version__

    return __version__


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


def set_flag(path: Path, **flags: bool) -> None:
    """Rewrite a ring's header with ``flags`` set (e.g. ``reported=True``)."""
    got = read_ring(path)
    if got is None:
        return
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, _pack(dict(got[0], **flags), HEADER), 0)
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


def _loop(rec: Recorder) -> None:
    while not _stop.wait(1.0):
        try:
            rec.write()
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
        _rec.cell = [count, first, time.time()]


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
