"""What the flight recorder reads each second: host memory and swap, this process's RSS and
CPU, its memory cgroup, and the shared sampler's newest GPU values and XID events."""

from __future__ import annotations

import os
import re
import time
import weakref
from collections.abc import Callable

from .metrics import HOST_KEY
from .sources.host import ProcFile

GPU_VALUES = ("mem_used_bytes", "util_pct", "power_w", "temp_c", "clock_event_reasons")
_HOST_ROW = ("host_ram_total_bytes", "host_ram_used_bytes", "proc_rss_bytes", "proc_cpu_pct")
_NONE = (None, None)
XIDS_KEPT = 4  # the newest GPU faults, in every record (older ones are in older records)

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
    """(limit, usage, events) files of this process's memory cgroup, v2 or v1 (events: the
    ``oom_kill`` count's ``memory.events`` or ``memory.oom_control``); None if none."""
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


def _from_sampler(cursor: list, s=None) -> tuple[list[list[float | None]], list[list]]:
    """[used, total, util, power, temp, clock-event reasons] of every GPU of sampler ``s`` (else
    the running shared one; never starts NVML), and its XID events newer than ``cursor``
    ([store ref, seq], advanced)."""
    if s is None:
        from . import session

        s = session.shared_sampler()
    if s is None:
        return [], []
    store = s.store
    if cursor[0] is None or cursor[0]() is not store:
        cursor[:] = [weakref.ref(store), 0]
    xids = []
    if store.events and store.events[-1].seq > cursor[1]:  # most seconds: no new event
        new = store.events_since(cursor[1])
        cursor[1] = new[-1].seq if new else cursor[1]
        xids = [[round(e.time, 3), e.device, e.extra.get("code")] for e in new if e.kind == "xid"]
    if not getattr(s, "running", False):
        return [], xids
    out: list[list[float | None]] = []
    for dev in s.devices:  # the store's newest values: a read that changes nothing in the sampler
        newest = store.last_many(dev.key, GPU_VALUES)  # NaN and None are both "not known" in a record
        used, util, power, temp, reasons = (newest.get(k, _NONE)[1] for k in GPU_VALUES)
        out.append([used, dev.mem_total_bytes, util, power, temp, reasons])
    return out, xids


SLOW_EVERY = 10  # swap, the cgroup's limit and its oom_kill count: read every 10th record


def _host_row(s, now: float | None) -> tuple[float, ...] | None:
    """(RAM total, RAM used, this kernel's RSS and CPU %, its children's counted) from sampler
    ``s``'s host row of tick ``now``, else None."""
    if s is None or now is None:
        return None
    row = s.store.last_many(HOST_KEY, _HOST_ROW)
    if row.get("host_ram_total_bytes", _NONE)[0] != now:
        return None
    values = tuple(row.get(k, _NONE)[1] for k in _HOST_ROW)
    return values if all(v is not None and v == v for v in values[:3]) else None


class Readings:
    """One record's figures at each ``read(cell)``; keeps its files open, the CPU clock's last
    value, and the slow-changing figures read every ``SLOW_EVERY``-th record."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.cgroup = memory_cgroup()
        self.xids: list[list] = []  # [time, gpu, code] of the newest GPU faults
        self._cursor: list = [None, 0]  # how far the shared sampler's events were read
        self._clock = clock
        self._files: dict[str, ProcFile] = {}
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._cpu = (time.monotonic(), sum(os.times()[:2]))
        self._count = 0
        self._slow: dict = {}  # swap_used, cg_max, cg_cur, cg_oom as last read

    def _read(self, path: str | None) -> bytes | None:
        if not path:
            return None
        f = self._files.get(path)
        if f is None:
            f = self._files[path] = ProcFile(path, 8192)
        return f.read()

    def read(self, cell: list | None, sampler=None, tick: float | None = None) -> dict:
        """One record of the host, this process, its cgroup, the GPUs and ``cell`` (the running
        one). At ``sampler``'s tick ``tick``, host RAM is the figure that tick just read."""
        slow = self._count % SLOW_EVERY == 0
        self._count += 1
        row = None if slow else _host_row(sampler, tick)
        m = _meminfo(self._read("/proc/meminfo")) if row is None else {}
        if row is not None:  # the tick read them: no /proc read here
            total, used, rss, pct = row
            avail = total - used
        else:
            now, cpu = time.monotonic(), sum(os.times()[:2])
            pct = 100.0 * (cpu - self._cpu[1]) / max(now - self._cpu[0], 1e-6)
            self._cpu = (now, cpu)
            pages = _int(self._read("/proc/self/statm"), 1)
            rss = pages * self._page if pages is not None else None
            total, avail = m.get(b"MemTotal"), m.get(b"MemAvailable")
        if slow:
            self._slow["swap_used"] = (m[b"SwapTotal"] - m[b"SwapFree"]
                                       if len(m) == len(_MEMINFO) else None)
        try:
            gpus, xids = _from_sampler(self._cursor, sampler)
        except Exception:
            gpus, xids = [], []
        if xids:
            self.xids = (self.xids + xids)[-XIDS_KEPT:]
        out = {"t": self._clock(), "ram_total": total, "ram_avail": avail,
               "ram_used": total - avail if total and avail is not None else None,
               "swap_used": self._slow.get("swap_used"),
               "rss": rss, "cpu": None if pct is None or pct != pct else round(pct, 1),
               "gpus": gpus, "cell": cell}
        if self.cgroup:
            if slow:
                cg_max = _int(self._read(self.cgroup[0]))  # v2 "max" reads None: no limit
                self._slow.update(cg_max=cg_max if cg_max and cg_max < UNLIMITED else None,
                                  cg_oom=_oom_kill(self._read(self.cgroup[2])))
            if slow or self._slow["cg_max"] is not None:  # usage each second only under a limit
                self._slow["cg_cur"] = _int(self._read(self.cgroup[1]))
            out.update(cg_max=self._slow["cg_max"], cg_cur=self._slow["cg_cur"], cg_oom=self._slow["cg_oom"])
        if self.xids:
            out["xid"] = self.xids
        return out

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
