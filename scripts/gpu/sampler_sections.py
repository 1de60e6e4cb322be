"""Where the sampler thread's CPU goes at defaults, part by part, without a profiler.

Runs ``nbgpu.Sampler()`` (defaults: diagnostics and host reads on) for ``--seconds`` with its
thread as it runs in a notebook, and counts the thread's CPU (``time.thread_time``) inside
each part of a step: NVML calls (``NVMLGateway.call``), the host reads, the store's appends,
the diagnostics (their context and each rule), and the whole step. What is left of a step
once the parts are taken off is the read loop's own Python. A profiler runs cold code
several times slower than it runs; two clock reads a part do not.

    python scripts/gpu/sampler_sections.py --out sections.json [--source nvml] [--seconds 31]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


PARTS = ("nvml calls", "host reads", "store appends", "diagnostics")  # none nests in another


class Sections:
    """CPU seconds of the sampler thread inside each wrapped function, and its calls."""

    def __init__(self) -> None:
        self.cpu_s: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._undo: list = []

    def timed(self, fn, name: str):
        """``fn``, counting its CPU and calls under ``name``."""
        cpu, calls = self.cpu_s, self.calls

        def timed(*args, **kwargs):
            c0 = time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                cpu[name] = cpu.get(name, 0.0) + time.thread_time() - c0
                calls[name] = calls.get(name, 0) + 1

        return timed

    def wrap(self, owner: object, attr: str, name: str) -> None:
        """Count ``owner.attr``'s CPU under ``name`` (a class's method, an instance's, a dict's item)."""
        if isinstance(owner, dict):
            original = owner[attr]
            owner[attr] = self.timed(original, name)
        else:
            original = getattr(owner, attr)
            setattr(owner, attr, self.timed(original, name))
        self._undo.append((owner, attr, original))

    def reset(self) -> None:
        self.cpu_s.clear()
        self.calls.clear()

    def undo(self) -> None:
        for owner, attr, original in reversed(self._undo):
            if isinstance(owner, dict):
                owner[attr] = original
            else:
                setattr(owner, attr, original)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--source", default="nvml")
    ap.add_argument("--seconds", type=float, default=31.0)
    args = ap.parse_args()

    import nbgpu
    from nbgpu.diagnostics import engine
    from nbgpu.sources.host import HostSource
    from nbgpu.sources.nvml import NVMLGateway
    from nbgpu.store import Store

    sections = Sections()
    sections.wrap(NVMLGateway, "call", "nvml calls")
    sections.wrap(HostSource, "read", "host reads")
    sections.wrap(Store, "append_many", "store appends")
    sections.wrap(Store, "append", "store appends")
    sections.wrap(engine.DiagnosticsEngine, "evaluate", "diagnostics")
    sections.wrap(engine.DiagnosticsEngine, "context", "diagnostics: context")
    for rule in list(engine.RULE_FUNCTIONS):
        sections.wrap(engine.RULE_FUNCTIONS, rule, f"diagnostics: {rule}")

    s = nbgpu.Sampler(args.source)
    sections.wrap(s, "step", "step")
    s.start()
    time.sleep(2.5)  # the first tick reads everything once: not the steady state
    sections.reset()
    t0 = time.perf_counter()
    time.sleep(args.seconds)
    wall_s = time.perf_counter() - t0
    cpu, calls = dict(sections.cpu_s), dict(sections.calls)
    s.stop()
    sections.undo()

    step = cpu.get("step", 0.0)
    parts = {k: v for k, v in cpu.items() if k in PARTS}
    rest = step - sum(parts.values())
    out = {"command": " ".join(["python", *sys.argv]), "source": s.status().source_description,
           "seconds": wall_s, "steps": calls.get("step", 0),
           "ms_per_s": {k: 1000 * v / wall_s for k, v in sorted(cpu.items(), key=lambda kv: -kv[1])},
           "calls_per_s": {k: v / wall_s for k, v in calls.items()},
           "read loop's own Python, ms_per_s": 1000 * rest / wall_s}
    args.out.write_text(json.dumps(out, indent=1))
    for k, v in out["ms_per_s"].items():
        print(f"{v:8.3f} ms/s  {out['calls_per_s'][k]:7.2f}/s  {k}")
    print(f"{1000 * rest / wall_s:8.3f} ms/s  the read loop's own Python")
    return 0


if __name__ == "__main__":
    sys.exit(main())
