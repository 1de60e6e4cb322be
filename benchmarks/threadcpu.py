"""CPU time of the sampler's own thread, measured from inside it (a listener) and from /proc,
and thread-CPU timers around named functions (``SectionTimers``)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable


def _proc_thread_cpu_s(tid: int) -> float | None:
    """utime + stime of one thread of this process from /proc (None where unavailable)."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class ThreadCpuProbe:
    """A sampler listener that records the sampler thread's CPU time at every tick.

    ``followers`` (listeners such as a ``TickSnapshots``) run inside it, just before it reads
    the clocks, and not once ``result()`` was taken: both see exactly the same ticks.
    """

    def __init__(self, followers: tuple = ()) -> None:
        self._lock = threading.Lock()
        self._followers = followers
        self._closed = False
        self.first: tuple[float, float] | None = None  # (wall, thread cpu)
        self.last: tuple[float, float] | None = None
        self.calls = 0
        self.tid: int | None = None
        self._proc_first: float | None = None

    def __call__(self, sampler: object, now: float) -> None:
        with self._lock:
            if self._closed:
                return
            for fn in self._followers:
                fn(sampler, now)
            point = (time.perf_counter(), time.thread_time())
            if self.first is None:
                self.first = point
                self.tid = threading.get_native_id()
                self._proc_first = _proc_thread_cpu_s(self.tid)
            self.last = point
            self.calls += 1

    def result(self) -> dict:
        """CPU seconds per wall second between the first and the last tick seen (no later
        tick is recorded)."""
        with self._lock:
            self._closed = True
            if self.first is None or self.last is None or self.last[0] <= self.first[0]:
                return {"ticks": self.calls, "cpu_s_per_s": float("nan")}
            wall = self.last[0] - self.first[0]
            cpu = self.last[1] - self.first[1]
            out = {"ticks": self.calls, "wall_s": wall, "thread_cpu_s": cpu, "cpu_s_per_s": cpu / wall}
            proc_now = _proc_thread_cpu_s(self.tid) if self.tid else None
            if proc_now is not None and self._proc_first is not None:
                out["proc_cpu_s"] = proc_now - self._proc_first
            return out


def measure(sampler, seconds: float, listeners: tuple = ()) -> dict:
    """Run a started-or-not sampler for ``seconds`` and return its thread's CPU use.

    ``listeners`` (e.g. a ``TickSnapshots``) run inside the probe at every tick, so they see
    the same ticks: not the step ``stop()`` makes after the last one (its final drains).
    """
    probe = ThreadCpuProbe(listeners)
    sampler.add_listener(probe)
    was_running = sampler.running
    sampler.start()
    time.sleep(seconds)
    result = probe.result()
    sampler.remove_listener(probe)
    if not was_running:
        sampler.stop()
    result["errors"] = sampler.errors
    result["last_error"] = sampler.last_error
    return result


class SectionTimers:
    """Thread-CPU nanoseconds and calls of named functions, counted by wrappers put around
    them (two clock reads a call, no profiler: cold code keeps its own cost); ``undo()``
    puts the functions back. Sections may nest: each counts its own calls in full."""

    def __init__(self) -> None:
        self.cpu_ns: Counter = Counter()
        self.calls: Counter = Counter()
        self._undo: list[tuple[object, str, object]] = []

    def wrap(self, owner: object, attr: str, name: str | Callable[..., str]) -> None:
        """Count ``owner.attr`` (a class's or an instance's function, or a dict's item) as ``name``
        (or as ``name(*args)``, a label from each call's arguments)."""
        is_dict = isinstance(owner, dict)
        inner = owner[attr] if is_dict else getattr(owner, attr)
        cpu_ns, calls = self.cpu_ns, self.calls

        def timed(*args, **kwargs):
            c0 = time.thread_time_ns()
            try:
                return inner(*args, **kwargs)
            finally:
                label = name(*args) if callable(name) else name
                cpu_ns[label] += time.thread_time_ns() - c0
                calls[label] += 1

        if is_dict:
            owner[attr] = timed
        else:
            setattr(owner, attr, timed)
        self._undo.append((owner, attr, inner))

    def reset(self) -> None:
        """Start counting afresh (after a warm-up)."""
        self.cpu_ns.clear()
        self.calls.clear()

    def undo(self) -> None:
        for owner, attr, inner in reversed(self._undo):
            if isinstance(owner, dict):
                owner[attr] = inner
            else:
                setattr(owner, attr, inner)
        self._undo.clear()
