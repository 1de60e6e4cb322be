"""Host CPU and RAM of the machine and of this process tree: /proc files kept open, else psutil."""

from __future__ import annotations

import contextlib
import os

import numpy as np


def descendant_pids(pid: int) -> set[int]:
    """Every descendant of ``pid`` (empty if none or gone): /proc's children lists, a read per
    process of the tree (psutil's ``children()`` reads every process), else psutil."""
    if (found := _proc_descendants(pid)) is not None:
        return found
    import psutil

    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def _proc_descendants(pid: int) -> set[int] | None:
    """``descendant_pids`` from every thread's children list; None where ``pid`` has none."""
    if not os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        return None
    found: set[int] = set()
    todo = [pid]
    while todo:
        tasks = f"/proc/{todo.pop()}/task"
        try:
            threads = os.listdir(tasks)
        except OSError:  # the process just ended
            threads = []
        for thread in threads:
            try:
                with open(f"{tasks}/{thread}/children", "rb") as f:
                    kids = {int(k) for k in f.read().split()} - found
            except (OSError, ValueError):  # the thread or process just ended
                continue
            found |= kids
            todo += kids
    return found


MEMINFO_PATH = "/proc/meminfo"
PROC_STAT_PATH = "/proc/stat"
SELF_STATM_PATH = "/proc/self/statm"
_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class ProcFile:
    """A /proc file kept open and read again from offset 0 (fresh figures, no open/close cost);
    ``read`` is None once it cannot be read; a forked process opens its own."""

    def __init__(self, path: str, size: int = 4096) -> None:
        self.path, self.size = path, size
        self._fd: int | None = None
        self._pid = 0

    def read(self) -> bytes | None:
        try:
            if self._fd is None or self._pid != os.getpid():
                self.close()
                self._fd, self._pid = os.open(self.path, os.O_RDONLY), os.getpid()
            return os.pread(self._fd, self.size, 0)
        except OSError:  # absent, or the process behind it ended
            self.close()
            return None

    def __del__(self) -> None:
        self.close()

    def close(self) -> None:
        """Close the file (a descriptor inherited through ``fork`` is left to its process)."""
        fd, self._fd = self._fd, None
        if fd is not None and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(fd)


def _meminfo_available(head: bytes | None) -> float | None:
    """MemAvailable in bytes from the start of /proc/meminfo (a tenth of psutil's cost); or None."""
    fields = (b"\n" + (head or b"")).partition(b"\nMemAvailable:")[2].split(b"\n", 1)[0].split()
    return float(fields[0]) * 1024.0 if fields and fields[0].isdigit() else None  # kB (KiB)


def _stat_cpu_s(head: bytes | None) -> tuple[float, float] | None:
    """(busy, total) CPU seconds of the machine from /proc/stat, as psutil counts them (no guest;
    busy leaves out idle and iowait)."""
    fields = (head or b"").split(b"\n", 1)[0].split()
    if len(fields) < 5 or fields[0] != b"cpu":
        return None
    try:
        ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    except ValueError:
        return None
    total = sum(ticks)
    return (total - ticks[3] - ticks[4]) / _CLOCK_TICKS, total / _CLOCK_TICKS


def _pid_stat_cpu_s(data: bytes | None) -> float | None:
    """User + system CPU seconds of a process from its /proc/<pid>/stat."""
    fields = (data or b"").rsplit(b")", 1)[-1].split()  # the name, in brackets, may hold spaces
    try:
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (IndexError, ValueError):
        return None


def _statm_rss_bytes(data: bytes | None) -> float | None:
    """Resident bytes of a process from its /proc/<pid>/statm (pages, second field)."""
    fields = (data or b"").split()
    try:
        return float(int(fields[1]) * _PAGE_BYTES)
    except (IndexError, ValueError):
        return None


class _Child:
    """One descendant's CPU and RSS: its /proc files kept open, or psutil where there are none."""

    def __init__(self, psutil, pid: int, procfs: bool) -> None:
        self.stat = ProcFile(f"/proc/{pid}/stat", 1024) if procfs else None
        self.statm = ProcFile(f"/proc/{pid}/statm", 256) if procfs else None
        self.process = None if procfs else psutil.Process(pid)
        self.base_s: float | None = None  # its CPU when first read: spent before it was seen

    def read(self, psutil) -> tuple[float, float] | None:
        """(CPU seconds, RSS bytes); None once the process has ended."""
        if self.process is None:
            cpu, rss = _pid_stat_cpu_s(self.stat.read()), _statm_rss_bytes(self.statm.read())
            return None if cpu is None or rss is None else (cpu, rss)
        try:
            ct = self.process.cpu_times()
            return ct.user + ct.system, float(self.process.memory_info().rss)
        except psutil.Error:
            return None

    def close(self) -> None:
        for f in (self.stat, self.statm):
            if f is not None:
                f.close()


class HostSource:
    """The machine's and this process tree's CPU and memory, cheap enough every tick; it keeps its
    own CPU baselines, so a user's ``psutil.cpu_percent()`` is undisturbed."""

    def __init__(self, children_every_s: float = 5.0) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process(os.getpid())
        self._children: dict[int, _Child] = {}
        self._children_every_s = children_every_s
        self._children_at = -np.inf
        self._gone_base_s = 0.0  # first readings of ended children: their time before being seen
        self._max_pct = 100.0 * (os.cpu_count() or 1)
        self._last: tuple[float, float] | None = None
        self._ram_total = float(psutil.virtual_memory().total)
        self._meminfo = ProcFile(MEMINFO_PATH, 512)  # where absent (not Linux) psutil answers
        self._stat = ProcFile(PROC_STAT_PATH, 256)
        self._statm = ProcFile(SELF_STATM_PATH, 256)
        self._procfs = _statm_rss_bytes(self._statm.read()) is not None
        self._cpu_last = self._machine_cpu_s()

    def _machine_cpu_s(self) -> tuple[float, float]:
        """(busy, total) CPU seconds of the machine: /proc/stat, else psutil's, counted alike."""
        if (got := _stat_cpu_s(self._stat.read())) is not None:
            return got
        t = self._psutil.cpu_times()
        total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
        return total - t.idle - getattr(t, "iowait", 0.0), total

    def _machine_cpu_pct(self) -> float:
        """Busy share of every CPU of the machine since the last reading (NaN if no time passed)."""
        busy, total = self._machine_cpu_s()
        busy0, total0 = self._cpu_last
        if total <= total0:  # the counters have not moved: the next reading covers both
            return np.nan
        self._cpu_last = (busy, total)
        return min(max(100.0 * (busy - busy0) / (total - total0), 0.0), 100.0)

    def _live_children(self) -> dict[int, _Child]:
        """This process's descendants, the known ones kept (their files stay open)."""
        live = {}
        for pid in descendant_pids(self._me.pid):
            if (child := self._children.pop(pid, None)) is None:
                try:
                    child = _Child(self._psutil, pid, self._procfs)
                except self._psutil.Error:  # ended since it was listed
                    continue
            live[pid] = child
        for gone in self._children.values():
            self._forget(gone)
        return live

    def _forget(self, child: _Child) -> None:
        """Close an ended child's files; its pre-seen time stays out once it is reaped here."""
        self._gone_base_s += child.base_s or 0.0
        child.close()

    def _tree_cpu_seconds(self, now: float) -> tuple[float, float]:
        """CPU seconds and RSS of this process and its children, each child counted from its first
        reading (what it spent before it was found is left out)."""
        if now - self._children_at >= self._children_every_s:
            self._children_at = now
            self._children = self._live_children()
        t = os.times()  # this process's clock and its reaped children's, without a /proc read
        cpu = t.user + t.system + t.children_user + t.children_system - self._gone_base_s
        rss = _statm_rss_bytes(self._statm.read()) if self._procfs else None
        if rss is None:
            rss = float(self._me.memory_info().rss)
        for pid, child in list(self._children.items()):
            if (got := child.read(self._psutil)) is None:
                self._forget(self._children.pop(pid))
                continue
            if child.base_s is None:
                child.base_s = got[0]
            cpu += got[0] - child.base_s
            rss += got[1]
        return cpu, rss

    def read(self, now: float) -> dict[str, float]:
        if (available := _meminfo_available(self._meminfo.read())) is None:
            available = float(self._psutil.virtual_memory().available)
        cpu_s, rss = self._tree_cpu_seconds(now)
        proc_pct = np.nan
        if self._last is not None and now > self._last[0]:
            pct = 100.0 * (cpu_s - self._last[1]) / (now - self._last[0])
            proc_pct = min(max(0.0, pct), self._max_pct)  # a never-seen child reaped at once
        self._last = (now, cpu_s)
        return {
            "host_cpu_pct": self._machine_cpu_pct(),
            "host_ram_used_bytes": self._ram_total - available,
            "host_ram_total_bytes": self._ram_total,
            "proc_cpu_pct": proc_pct,
            "proc_rss_bytes": rss,
        }

    def close(self) -> None:
        """Close the /proc files it keeps open (reading again opens them again)."""
        for f in (self._meminfo, self._stat, self._statm, *self._children.values()):
            f.close()
        self._children = {}
        self._children_at = -np.inf
        self._last = None  # children found again start from new baselines
