"""``nbgpu.memory_by_name`` on a namespace of 10,000 names, one a 100,000-element list.

The names are what a long notebook session leaves behind: numbers, strings, small lists
and dicts, dataclass records, objects with properties and slotted objects (3 names in 10
hold a tensor), a cycle, and one huge list. CPU tensors stand in for CUDA ones (the walk is the same); the
figure is the median wall time of a whole ``memory_by_name`` call, the table included.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .registry import Context
from .report import Outcome, Target, UnavailableError
from .stats import median

WALK_TARGET_MS = 50.0
NAMES = 10_000
BIG_LIST = 100_000


@dataclass
class _Record:
    step: int
    loss: object


class _WithProperty:
    def __init__(self, t: object) -> None:
        self.t = t

    @property
    def expensive(self) -> object:
        raise RuntimeError("a property was called")


class _Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a: object, b: object) -> None:
        self.a, self.b = a, b


def namespace(torch) -> dict:
    """10,000 names in all, the 100,000-element list among them."""
    ns: dict = {"big": [torch.zeros(4), *range(BIG_LIST)]}
    cyc: list = [torch.zeros(2)]
    cyc.append(cyc)
    ns["cyc"] = cyc
    kinds = (lambda i: i, lambda i: f"text {i}", lambda i: [i, i + 1, str(i)],
             lambda i: {"i": i, "s": str(i)}, lambda i: _Record(i, torch.zeros(1)),
             lambda i: _WithProperty(torch.zeros(1)), lambda i: _Slotted(i, torch.zeros(1)),
             lambda i: (i, str(i)), lambda i: float(i), lambda i: _Record(i, float(i)))
    i = 0
    while len(ns) < NAMES:
        ns[f"v{i}"] = kinds[i % len(kinds)](i)
        i += 1
    return ns


def run(ctx: Context) -> Outcome:
    try:
        import torch
    except ImportError as exc:
        raise UnavailableError(f"torch is needed for tensors to find: {exc}") from exc
    import nbgpu

    ns = namespace(torch)
    repeats = 5 if ctx.quick else 30
    nbgpu.memory_by_name(device="cpu", namespace=ns)  # first call: pandas and imports warm
    walk_ms, cpu_ms, rows = [], [], 0
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.thread_time()
        table = nbgpu.memory_by_name(device="cpu", namespace=ns)
        cpu_ms.append(1000 * (time.thread_time() - c0))
        walk_ms.append(1000 * (time.perf_counter() - t0))
        rows = len(table)
    out = Outcome(raw={"names": len(ns), "big_list": BIG_LIST, "repeats": repeats, "walk_ms": walk_ms,
                       "walk_cpu_ms": cpu_ms, "rows": rows})
    out.targets.append(Target(f"memory_by_name, {len(ns):,} names (median, CPU)", median(cpu_ms), "ms",
                              "<=", WALK_TARGET_MS,
                              note="the calling thread's CPU time: the walk waits on nothing"))
    out.figure("the same, wall clock (median)", median(walk_ms), "ms")
    out.figure("slowest walk, wall clock", max(walk_ms), "ms")
    out.figure("names holding tensors", rows, "")
    return out
