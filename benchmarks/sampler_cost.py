"""Benchmark 4: CPU seconds per wall second of the sampler thread, and where they go.

The thread's CPU is read inside it (``time.thread_time`` from a listener) and from /proc.
A second pass times every NVML call the thread makes (CPU time of the calling thread
around ``NVMLGateway.call``), so the figure splits into NVML functions and nbgpu's own
Python; the floor is what the NVML calls needed for native resolution cost by themselves.
Both count only between the first tick and the last (the start-up probe is a separate,
one-time cost), over two periods of the costly reads (energy, PCIe: 15 s each), so the
figure is the steady state.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from contextlib import contextmanager

from .registry import Context
from .report import Outcome, Target, UnavailableError
from .threadcpu import measure

SAMPLER_CPU_TARGET_S_PER_S = 0.003
STEADY_S = 31.0  # two periods of the 15 s costly reads, plus a tick


@contextmanager
def timed_nvml_calls():
    """Record (calls, thread CPU s, wall s) per NVML function called through the gateway."""
    from nbgpu.sources.nvml_gateway import NVMLGateway

    table: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    lock = threading.Lock()
    original = NVMLGateway.call

    def call(self, function: str, *args):
        c0, w0 = time.thread_time(), time.perf_counter()
        try:
            return original(self, function, *args)
        finally:
            c1, w1 = time.thread_time(), time.perf_counter()
            with lock:
                row = table[function]
                row[0] += 1
                row[1] += c1 - c0
                row[2] += w1 - w0

    NVMLGateway.call = call
    try:
        yield table
    finally:
        NVMLGateway.call = original


def _run(ctx: Context, source: object, gpus: list[int] | None, label: str,
         interval: float | None = None, watched: bool = False) -> tuple[dict, Outcome]:
    """``watched``: someone asks for the newest values at every step, as a live panel does
    each refresh, so the sample buffers are drained at their live periods."""
    import nbgpu

    seconds = 4.0 if ctx.quick else STEADY_S
    kwargs = {} if interval is None else {"interval": interval}
    sampler = nbgpu.Sampler(source=source, gpus=gpus, **kwargs)
    if watched:
        sampler.add_listener(lambda s, _now: s.watch())
    res = measure(sampler, seconds)
    res.update(devices=len(sampler.devices), interval_s=sampler.interval,
               source=sampler.status().source_description)
    out = Outcome(raw=res)
    out.figure(f"sampler thread CPU, {label}", res["cpu_s_per_s"], "CPU s/s")
    return res, out


class TickSnapshots:
    """A sampler listener that copies the NVML call table at every tick: the first and the last
    copy bound the same span as ``ThreadCpuProbe``'s figure (first to last tick).

    Given to ``measure(..., listeners=(snapshots,))``, it runs inside the probe, just before
    the probe reads the thread's CPU, and not after the probe's result was taken.
    What runs after the last tick (``stop()``: the final drains of its last step, the
    sources' final reads, ``nvmlShutdown``) is outside both. A copy costs a few µs a tick,
    inside the figure.
    """

    def __init__(self, table: dict[str, list[float]]) -> None:
        self._table = table
        self.first: dict[str, list[float]] | None = None
        self.last: dict[str, list[float]] = {}
        self.calls = 0

    def __call__(self, _sampler: object, _now: float) -> None:
        self.calls += 1
        copy = {fn: list(row) for fn, row in self._table.items()}
        if self.first is None:
            self.first = copy
        self.last = copy

    def steady(self) -> dict[str, list[float]]:
        """(calls, CPU s, wall s) per NVML function from the first tick to the last, none zero."""
        first = self.first or {}
        out = {}
        for fn, row in self.last.items():
            d = [a - b for a, b in zip(row, first.get(fn, (0, 0.0, 0.0)), strict=True)]
            if d[0]:
                out[fn] = d
        return out


def split_by_function(steady: dict[str, list[float]], wall_s: float, thread_cpu_s_per_s: float
                      ) -> dict:
    """The thread's CPU per second split into NVML functions (from ``TickSnapshots.steady``,
    over the same ``wall_s``) and what is left: nbgpu's own Python."""
    per_fn = {fn: {"calls_per_s": n / wall_s, "cpu_ms_per_s": 1000 * cpu / wall_s,
                   "cpu_us_per_call": 1e6 * cpu / n, "wall_ms_per_s": 1000 * w / wall_s}
              for fn, (n, cpu, w) in sorted(steady.items(), key=lambda kv: -kv[1][1])}
    nvml_ms = sum(v["cpu_ms_per_s"] for v in per_fn.values())
    total_ms = 1000 * thread_cpu_s_per_s
    return {"per_function": per_fn, "nvml_cpu_ms_per_s": nvml_ms, "thread_cpu_ms_per_s": total_ms,
            "python_cpu_ms_per_s": total_ms - nvml_ms}


def _breakdown(ctx: Context, gpus: list[int], source: object = "nvml") -> dict:
    """Thread CPU per second split by NVML function, at defaults, one more run; the calls are
    counted over the span the thread's CPU is (first tick to last), not up to ``stop()``."""
    import nbgpu

    seconds = 4.0 if ctx.quick else STEADY_S
    with timed_nvml_calls() as table:
        sampler = nbgpu.Sampler(source=source, gpus=gpus)
        ticks = TickSnapshots(table)
        res = measure(sampler, seconds, listeners=(ticks,))
    wall = res.get("wall_s") or seconds
    split = split_by_function(ticks.steady(), wall, res["cpu_s_per_s"])
    split["run"] = res
    return split


def run_gpu_one(ctx: Context) -> Outcome:
    """One real GPU (GPU 0): defaults with nobody watching and watched, alternated twice
    (A B B A, so drift over the run falls on both alike), interval 0.1 s, and where the
    defaults' CPU goes. One 31 s run varies from the next by more than 0.5 ms/s on the H200,
    so the target is the mean of the two unwatched runs, each run reported beside it."""
    import statistics

    runs: dict[str, list[dict]] = {"defaults": [], "defaults_watched": []}
    for name in ("defaults", "defaults_watched", "defaults_watched", "defaults"):
        res, _ = _run(ctx, "nvml", [0], name, watched=name.endswith("watched"))
        runs[name].append(res)
    mean = {name: statistics.fmean(r["cpu_s_per_s"] for r in rs) for name, rs in runs.items()}
    out = Outcome(raw={"runs": runs, "order": "defaults, watched, watched, defaults"})
    for name, label in (("defaults", "defaults"),
                        ("defaults_watched", "defaults, watched (a live view asks for the newest "
                                             "values: utilisation drained every 5 s, not 10 s)")):
        each = ", ".join(f"{1000 * r['cpu_s_per_s']:.2f}" for r in runs[name])
        out.figure(f"sampler thread CPU, 1 GPU, {label} (mean of 2 runs: {each} ms/s)", mean[name],
                   "CPU s/s")
    out.targets.append(Target("sampler thread CPU at defaults, 1 GPU (mean of 2 runs)",
                              mean["defaults"], "CPU s/s", "<=", SAMPLER_CPU_TARGET_S_PER_S))
    fast, _ = _run(ctx, "nvml", [0], "1 GPU, interval 0.1 s", interval=0.1)
    out.raw["interval_0.1"] = fast
    out.figure("sampler thread CPU, 1 GPU, interval 0.1 s", fast["cpu_s_per_s"], "CPU s/s")
    split = _breakdown(ctx, [0])
    out.raw["breakdown_defaults"] = split
    out.figure("breakdown run (defaults, one more run, every NVML call timed)",
               split["thread_cpu_ms_per_s"] / 1000, "CPU s/s")
    out.figure("of which NVML calls", split["nvml_cpu_ms_per_s"] / 1000, "CPU s/s")
    out.figure("of which nbgpu's Python", split["python_cpu_ms_per_s"] / 1000, "CPU s/s")
    top = list(split["per_function"].items())[:3]
    out.notes.append("costliest NVML calls at defaults: " + "; ".join(
        f"{fn} {v['calls_per_s']:.2f}/s × {v['cpu_us_per_call']:.0f} µs = {v['cpu_ms_per_s']:.2f} ms/s"
        for fn, v in top))
    return out


def run_gpu_two(ctx: Context) -> Outcome:
    """Two real GPUs (0 and 1), defaults."""
    if len(ctx.gpus.names) < 2:
        raise UnavailableError(f"needs 2 GPUs, this machine has {len(ctx.gpus.names)}")
    return _run(ctx, "nvml", [0, 1], "2 GPUs")[1]


def run_simulated(ctx: Context) -> Outcome:
    """Eight simulated GPUs (the in-process NVML stand-in, so more Python work than real NVML)."""
    import nbgpu

    out = _run(ctx, nbgpu.SimulatedGPUs(count=8, seed=0), None, "8 simulated GPUs")[1]
    out.notes.append("Simulated GPUs compute their readings in Python inside the NVML calls, so "
                     "this over-states the cost of real NVML reads.")
    return out


PYTHON_ARMS = {"defaults": {}, "no diagnostics": {"diagnostics": False},
               "no host reads": {"host": False},
               "neither": {"diagnostics": False, "host": False}}
# The same at defaults after an hour of steps (the store's full-resolution horizon): what a
# read of the last seconds costs must not grow with the rows kept behind them.
LONG_HISTORY_ARM = ("defaults, after 1 h", {}, 3600)
# The same with the store's 10,000 events all marks (``nbgpu.track()`` marks every
# iteration): the diagnostics, run every 2 s in the thread, must not read them all each time.
MARKS_ARM = ("defaults, 10,000 marks", 10_000)


def stepped_arms() -> dict[str, tuple[dict, int, int]]:
    """Every arm of ``python_per_step``: name -> (Sampler keywords, warm-up steps, marks)."""
    long_name, long_kwargs, long_warmup = LONG_HISTORY_ARM
    marks_name, marks = MARKS_ARM
    return {**{arm: (kw, 40, 0) for arm, kw in PYTHON_ARMS.items()},
            long_name: (long_kwargs, long_warmup, 0), marks_name: ({}, 40, marks)}


_inside_s = [0.0]  # thread CPU seconds spent inside NVML calls since the last reset
_timer: list = [0, None]  # (samplers using the timed gateway, the gateway's own call)


def _time_gateway(on: bool) -> None:
    """Count the CPU time inside every NVML call (the stand-in's Python) while a user needs it."""
    from nbgpu.sources.nvml_gateway import NVMLGateway

    if on:
        if _timer[0] == 0:
            original = _timer[1] = NVMLGateway.call

            def call(self, function: str, *args):
                c0 = time.thread_time()
                try:
                    return original(self, function, *args)
                finally:
                    _inside_s[0] += time.thread_time() - c0

            NVMLGateway.call = call
        _timer[0] += 1
        return
    _timer[0] -= 1
    if _timer[0] == 0:
        NVMLGateway.call = _timer[1]


class _FakeClock:
    def __init__(self) -> None:
        self.t = 1.7e9

    def __call__(self) -> float:
        return self.t


class SteppedSampler:
    """A sampler on 1 simulated GPU at interval 1 s, stepped on a fake clock one second a step,
    whose steps report nbgpu's own Python: the thread's CPU less the time inside the NVML
    stand-in's calls.

    The stand-in computes its readings in Python, so the thread's whole CPU says little
    about a real card; what is left once its calls are subtracted is nbgpu's own work (the
    schedule, the reads' handling, the store, the diagnostics rules, the host reads), which
    is the same on a real card. The two clock reads around each call stay in the figure.
    """

    def __init__(self, kwargs: dict, warmup: int, marks: int = 0) -> None:
        import nbgpu

        _time_gateway(True)
        self.clock = _FakeClock()
        try:
            self.sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=1, seed=0, clock=self.clock),
                                         clock=self.clock, **kwargs)
        except Exception:
            _time_gateway(False)
            raise
        self._step(warmup)
        for i in range(marks):  # one a second, the newest just now (``mark(label, t)``)
            self.sampler.mark(f"step {i}", self.clock.t - marks + i + 1)

    def _step(self, steps: int) -> None:
        for _ in range(steps):
            self.clock.t += 1.0
            self.sampler.step(self.clock.t)

    def python_ms_per_step(self, steps: int) -> float:
        """Run ``steps`` steps; nbgpu's own Python CPU ms per step (the stand-in's time out)."""
        _inside_s[0] = 0.0
        c0 = time.thread_time()
        self._step(steps)
        total = time.thread_time() - c0
        self.stand_in_ms_per_step = 1000 * _inside_s[0] / steps
        return 1000 * (total - _inside_s[0]) / steps

    def close(self) -> None:
        self.sampler.stop()
        _time_gateway(False)


def python_per_step(kwargs: dict, steps: int, warmup: int = 40, marks: int = 0) -> dict:
    """``SteppedSampler``'s figure for one run of ``steps`` steps after ``warmup`` steps."""
    stepped = SteppedSampler(kwargs, warmup, marks)
    try:
        ms = stepped.python_ms_per_step(steps)
    finally:
        stepped.close()
    return {"python_ms_per_step": ms, "stand_in_ms_per_step": stepped.stand_in_ms_per_step,
            "steps": steps}


def run_python(ctx: Context) -> Outcome:
    """nbgpu's own Python per sampler step at defaults, and without diagnostics or host reads:
    arms alternated over rounds, medians reported (the CPU part of the sampler's cost that
    the CPU machine resolves; the GPU benchmark's 'of which nbgpu's Python' is its real-card twin)."""
    import statistics

    rounds, steps = (2, 60) if ctx.quick else (7, 300)
    arms = stepped_arms()
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for _ in range(rounds):
        for arm, (kwargs, warmup, marks) in arms.items():
            if ctx.quick:
                warmup = min(warmup, 60)
            runs[arm].append(python_per_step(kwargs, steps, warmup, marks))
    out = Outcome(raw={"runs": runs, "rounds": rounds, "steps_per_run": steps,
                       "setup": "1 simulated GPU, interval 1 s, one step per fake second"})
    for arm in runs:
        ms = statistics.median(r["python_ms_per_step"] for r in runs[arm])
        out.figure(f"nbgpu's Python per sampler step, {arm} (median of {rounds})", ms, "ms")
    out.notes.append("CPU time of the stepping thread minus the time inside the NVML stand-in's "
                     "calls; one step a fake second at interval 1 s, so ms per step is ms per "
                     "second of a real sampler")
    return out
