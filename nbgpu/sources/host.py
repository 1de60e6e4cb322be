"""Host CPU and RAM of the machine and of this process with its children (psutil)."""

from __future__ import annotations

import os

import numpy as np

from ..metrics import HOST_COLUMNS as COLUMNS
from ..metrics import HOST_KEY

__all__ = ["COLUMNS", "HOST_KEY", "HostSource", "descendant_pids"]


def descendant_pids(pid: int) -> set[int]:
    """Every descendant of ``pid`` (empty if it has none or is gone).

    Read from ``/proc/<pid>/task/*/children`` down the tree: a read per process of the tree,
    where psutil's ``children()`` reads every process of the machine (4 ms a scan on a GPU
    host). psutil answers where the kernel offers no such file (not Linux, or built without).
    """
    found = _proc_descendants(pid)
    if found is not None:
        return found
    import psutil

    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.Error:
        return set()


def _proc_descendants(pid: int) -> set[int] | None:
    """``descendant_pids`` from /proc's children lists; None where ``pid`` has none to read.

    Every thread of a process has its own list (a child belongs to the thread that forked
    it), so each thread's is read; listing the task folder is half the cost of a glob.
    """
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        tasks = f"/proc/{parent}/task"
        try:
            threads = os.listdir(tasks)
        except OSError:  # the process just ended
            threads = []
        if parent == pid and not os.path.exists(f"{tasks}/{pid}/children"):
            return None
        for thread in threads:
            try:
                with open(f"{tasks}/{thread}/children", "rb") as f:
                    kids = [int(k) for k in f.read().split()]
            except (OSError, ValueError):  # the thread or process just ended
                continue
            for kid in kids:
                if kid not in found:
                    found.add(kid)
                    todo.append(kid)
    return found


MEMINFO_PATH = "/proc/meminfo"


def meminfo_available_bytes(path: str | None = None) -> float | None:
    """MemAvailable of the kernel's /proc/meminfo, in bytes; None where it has none.

    It is the third line: read alone it costs a tenth of psutil's ``virtual_memory``, which
    parses all ~50 fields (0.2 ms at every tick of the sampler on a GPU host).
    """
    try:
        with open(path or MEMINFO_PATH, "rb") as f:
            head = f.read(512)
    except OSError:
        return None
    for line in head.split(b"\n"):
        if line.startswith(b"MemAvailable:"):
            fields = line.split()
            if len(fields) >= 2 and fields[1].isdigit():
                return float(fields[1]) * 1024.0  # the kernel writes kB (KiB)
    return None


class HostSource:
    """Reads the machine's and this process tree's CPU and memory; cheap enough every tick."""

    def __init__(self, children_every_s: float = 5.0) -> None:
        import psutil

        self._psutil = psutil
        self._me = psutil.Process(os.getpid())
        self._children: dict[int, object] = {}
        self._children_every_s = children_every_s
        self._children_at = -np.inf
        self._last: tuple[float, float] | None = None
        self._ram_total = float(psutil.virtual_memory().total)
        self._meminfo = meminfo_available_bytes() is not None  # else psutil answers (not Linux)
        psutil.cpu_percent(None)  # first call primes the counter

    def _live_children(self) -> dict[int, object]:
        """psutil handles of this process's descendants, the known ones kept (their CPU counters)."""
        ps = self._psutil
        live = {}
        for pid in descendant_pids(self._me.pid):
            try:
                live[pid] = self._children.get(pid) or ps.Process(pid)
            except ps.Error:  # ended since it was listed
                continue
        return live

    def _tree_cpu_seconds(self, now: float) -> tuple[float, float]:
        """CPU seconds of this process, its reaped children and its live children; their RSS."""
        ps = self._psutil
        if now - self._children_at >= self._children_every_s:
            self._children_at = now
            self._children = self._live_children()
        t = os.times()  # this process's clock and its reaped children's, without a /proc read
        cpu = t.user + t.system + t.children_user + t.children_system
        rss = float(self._me.memory_info().rss)
        for pid, child in list(self._children.items()):
            try:
                ct = child.cpu_times()
                cpu += ct.user + ct.system
                rss += float(child.memory_info().rss)
            except ps.Error:
                self._children.pop(pid, None)
        return cpu, rss

    def _ram_available_bytes(self) -> float:
        available = meminfo_available_bytes() if self._meminfo else None
        if available is None:
            available = float(self._psutil.virtual_memory().available)
        return available

    def read(self, now: float) -> dict[str, float]:
        ps = self._psutil
        available = self._ram_available_bytes()
        cpu_s, rss = self._tree_cpu_seconds(now)
        proc_pct = np.nan
        if self._last is not None and now > self._last[0]:
            proc_pct = max(0.0, 100.0 * (cpu_s - self._last[1]) / (now - self._last[0]))
        self._last = (now, cpu_s)
        return {
            "host_cpu_pct": float(ps.cpu_percent(None)),
            "host_ram_used_bytes": self._ram_total - available,
            "host_ram_total_bytes": self._ram_total,
            "proc_cpu_pct": proc_pct,
            "proc_rss_bytes": rss,
        }
