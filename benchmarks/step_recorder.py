"""Per-step records of a loop: each step's end time and the CPU clock of a set of other threads.

A thread's CPU clock is read with ``time.clock_gettime_ns`` on its clock id (Linux: the id
``pthread_getcpuclockid`` gives, computed from the thread's kernel id, so threads started
from C are found as well as Python's). One read per watched thread per step; what the
reads cost a step is measured by ``recording_cost_ns``.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


def thread_ids() -> set[int]:
    """Kernel ids of this process's live threads (empty where /proc is unavailable)."""
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:
        return set()


def _clock_of_tid(tid: int) -> int:
    """The CPU-time clock id of kernel thread ``tid``, as glibc's pthread_getcpuclockid builds it."""
    return (~tid << 3) | 6  # CPUCLOCK_SCHED | CPUCLOCK_PERTHREAD_MASK


def tid_clocks_work() -> bool:
    """Whether clock ids built from kernel ids match ``pthread_getcpuclockid`` here."""
    try:
        return _clock_of_tid(threading.get_native_id()) == time.pthread_getcpuclockid(threading.get_ident())
    except (AttributeError, OSError):
        return False


def _thread_name(tid: int, names: dict[int, str]) -> str:
    if tid in names:
        return names[tid]
    try:
        with open(f"/proc/self/task/{tid}/comm") as f:
            return f"{f.read().strip()} (native)"
    except OSError:
        return f"tid {tid} (native)"


@dataclass
class ThreadClocks:
    """The CPU clocks of the threads that are alive now but were not in ``before`` (kernel ids)."""

    tids: list[int] = field(default_factory=list)
    clocks: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)

    @classmethod
    def new_since(cls, before: set[int]) -> ThreadClocks:
        """Every thread started since ``before`` was taken, the calling thread excepted."""
        me = threading.get_native_id()
        py = {t.native_id: t for t in threading.enumerate() if t.native_id is not None}
        names = {tid: t.name for tid, t in py.items()}
        out = cls()
        by_tid = tid_clocks_work()
        for tid in sorted(thread_ids() - before - {me}):
            if by_tid:
                clock = _clock_of_tid(tid)
            elif tid in py and py[tid].ident is not None:
                clock = time.pthread_getcpuclockid(py[tid].ident)
            else:
                continue  # a thread started from C, and no way to name its clock here
            try:
                time.clock_gettime_ns(clock)
            except OSError:  # it ended meanwhile
                continue
            out.tids.append(tid)
            out.clocks.append(clock)
            out.names.append(_thread_name(tid, names))
        return out

    def total_ns(self) -> int:
        """Summed CPU nanoseconds of the threads still alive."""
        total = 0
        for c in self.clocks:
            try:
                total += time.clock_gettime_ns(c)
            except OSError:
                continue
        return total


@dataclass
class Recording:
    """One span of a loop: mark 0 before the first step, mark k after step k."""

    end_ns: np.ndarray
    cpu_ns: np.ndarray
    truncated: bool  # the preallocated arrays filled up before the span ended
    threads_ended: int  # watched threads that ended during the span
    first_ns: dict[int, int]  # clock id -> its reading in mark 0 (threads alive then)
    last_ns: dict[int, int]  # clock id -> its reading just after the last mark (alive then)


def record_steps(step: Callable[[], None], clocks: list[int], seconds: float,
                 max_steps: int) -> Recording:
    """Run ``step`` for ``seconds``; after each step store the time and the summed clock of ``clocks``.

    A watched thread that ends mid-span is dropped and the step where that was noticed
    counts as touched (its clock is moved on by 1 ns).
    """
    cap = max_steps + 1
    ends = np.empty(cap, dtype=np.int64)
    cpus = np.empty(cap, dtype=np.int64)
    now, read = time.perf_counter_ns, time.clock_gettime_ns
    first = _read_alive(list(clocks))
    ids = list(first)
    offset, ended = 0, len(clocks) - len(ids)
    deadline = now() + int(seconds * 1e9)
    ends[0] = now()
    cpus[0] = sum(first.values())
    i = 1
    while i < cap:
        step()
        t = now()
        try:
            c = offset + sum(map(read, ids))
        except OSError:
            alive = _read_alive(ids)
            ended += len(ids) - len(alive)
            ids = list(alive)
            offset = int(cpus[i - 1]) + 1 - sum(alive.values())
            c = offset + sum(alive.values())
        ends[i] = t
        cpus[i] = c
        i += 1
        if t >= deadline:
            break
    return Recording(ends[:i].copy(), cpus[:i].copy(), i == cap, ended, first, _read_alive(ids))


def _read_alive(clocks: list[int]) -> dict[int, int]:
    """Clock id → nanoseconds, for the clocks whose thread is still alive."""
    out = {}
    for c in clocks:
        try:
            out[c] = time.clock_gettime_ns(c)
        except OSError:
            continue
    return out


def recording_cost_ns(clocks: list[int], iterations: int = 20000) -> float:
    """Mean nanoseconds that ``record_steps`` adds to one step with these clocks (no step run)."""
    ends = np.empty(iterations, dtype=np.int64)
    cpus = np.empty(iterations, dtype=np.int64)
    now, read = time.perf_counter_ns, time.clock_gettime_ns
    ids = list(clocks)
    t0 = now()
    for i in range(iterations):
        t = now()
        try:
            c = sum(map(read, ids))
        except OSError:
            c = 0
        ends[i] = t
        cpus[i] = c
    return (now() - t0) / iterations


def place_threads(loop_cpu: int, other_cpus: set[int]) -> int:
    """The calling thread alone on ``loop_cpu``, every other thread on ``other_cpus``; how many moved."""
    me = threading.get_native_id()
    moved = 0
    for tid in thread_ids():
        try:
            os.sched_setaffinity(tid, {loop_cpu} if tid == me else other_cpus)
            moved += 1
        except OSError:  # it just ended
            continue
    return moved
