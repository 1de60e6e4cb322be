"""Host CPU and RAM of the machine and of this process with its children (psutil)."""

from __future__ import annotations

import os

import numpy as np

from ..metrics import HOST_COLUMNS as COLUMNS
from ..metrics import HOST_KEY

__all__ = ["COLUMNS", "HOST_KEY", "HostSource"]


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
        psutil.cpu_percent(None)  # first call primes the counter

    def _tree_cpu_seconds(self, now: float) -> tuple[float, float]:
        """CPU seconds of this process, its reaped children and its live children; their RSS."""
        ps = self._psutil
        if now - self._children_at >= self._children_every_s:
            self._children_at = now
            try:
                live = {c.pid: c for c in self._me.children(recursive=True)}
            except ps.Error:
                live = {}
            self._children = {pid: self._children.get(pid, c) for pid, c in live.items()}
        t = self._me.cpu_times()
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

    def read(self, now: float) -> dict[str, float]:
        ps = self._psutil
        vm = ps.virtual_memory()
        cpu_s, rss = self._tree_cpu_seconds(now)
        proc_pct = np.nan
        if self._last is not None and now > self._last[0]:
            proc_pct = max(0.0, 100.0 * (cpu_s - self._last[1]) / (now - self._last[0]))
        self._last = (now, cpu_s)
        return {
            "host_cpu_pct": float(ps.cpu_percent(None)),
            "host_ram_used_bytes": float(vm.total - vm.available),
            "host_ram_total_bytes": self._ram_total,
            "proc_cpu_pct": proc_pct,
            "proc_rss_bytes": rss,
        }
