"""Benchmark 1: how much each monitor slows a training loop, resolved to a fraction of a percent.

A launch-bound loop's speed drifts by several percent from one second to the next on a
shared machine, so one-second repeats cannot resolve 0.5 %. This benchmark times many
short blocks instead and pairs them in ABBA quartets: for each monitor, blocks run in the
order on, off, off, on (then off, on, on, off for the next quartet), so a drift that is
linear over a quartet cancels. Each quartet gives one slowdown (the mean rate of its two
"on" blocks against its two "off" blocks); the figure is the median over quartets, with
a distribution-free 95 % interval from order statistics.

Two more arms check the method itself:

- ``control``: a monitor that starts a thread which does nothing. Its interval must
  contain 0; if it does not, the method is biased and the other figures are not trusted.
- every arm also reports its threads' CPU seconds per second during its "on" blocks
  (``time.pthread_getcpuclockid`` of every thread but the loop's). Python code holds the
  GIL while it runs, NVML calls release it, so this is an upper bound on the time the
  monitor held the GIL away from the loop: a second, low-noise figure.

The process runs on two CPUs: the loop's thread alone on one, every other thread (the
monitors', the driver's) on the other, placed again before each block; a loop that moved
between CPUs ran at two speeds 50 % apart, block to block (H200 machine, 2026-12-01).

A monitor is started (and, for the panel, given a full window of history) before its
"on" block and stopped after it, both outside the timed span. An untimed warm-up of a
random length between 0.1 s and 0.1 s + the monitor's period follows each start, and a
block lasts at least two periods, so blocks land at every phase of the monitor's schedule
(a block shorter than the sampler's interval, started right after its first tick,
would never see a tick and would under-state its cost: seen in a first run on the H200).
``NBGPU_BENCH_QUARTETS`` and ``NBGPU_BENCH_LOOPS`` (e.g. ``launch_bound``) shorten a run;
the results record what was used.
"""

from __future__ import annotations

import os
import random
import threading
import time

from .gpu_loops import ComputeBound, LaunchBound, Loop
from .monitors import (
    ControlMonitor,
    Monitor,
    NaivePollMonitor,
    NbgpuMonitor,
    NbgpuPanelMonitor,
    NvitopMonitor,
)
from .registry import Context
from .report import Outcome, Target, UnavailableError
from .stats import median, median_interval, slowdown_pct

LAUNCH_TARGET_PCT = 0.5
NAIVE_FRACTION_TARGET = 1 / 3
WARMUP_S = 0.1


def monitors_for(gpus: list[int], nvml=None, source: object = "nvml") -> list[Monitor]:
    """The compared monitors, those unavailable here included (they are reported, not run)."""
    return [ControlMonitor(), NbgpuMonitor(source, gpus), NbgpuPanelMonitor(source, gpus),
            NaivePollMonitor(nvml, gpus), NvitopMonitor()]


def other_threads_cpu_s() -> float:
    """CPU seconds used so far by every live thread of this process except the calling one."""
    me = threading.get_ident()
    total = 0.0
    for t in threading.enumerate():
        if t.ident is None or t.ident == me or not t.is_alive():
            continue
        try:
            total += time.clock_gettime(time.pthread_getcpuclockid(t.ident))
        except (OSError, AttributeError, ProcessLookupError):
            continue
    return total


_placement: dict[str, int] = {}  # "loop" and "others": the CPU of each, while pinned


def _place_threads() -> None:
    """The loop's thread on its own CPU, every other thread of the process on the other.

    A launch-bound loop that moves between CPUs runs at two speeds (1,400 and 2,100 steps/s
    on the H200 machine, block to block), which no pairing resolves; on one CPU it keeps one.
    The monitors' threads still take the GIL from it, which is the cost being measured.
    """
    if not _placement:
        return
    me = threading.get_native_id()
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return
    for tid in tids:
        try:
            os.sched_setaffinity(tid, {_placement["loop" if tid == me else "others"]})
        except OSError:  # the thread just ended
            continue


def _block(loop: Loop, monitor: Monitor | None, steps: int,
           rng: random.Random | None = None) -> tuple[float, float, float, dict]:
    """One timed block: (steps/s, wall s, other threads' CPU s, monitor facts)."""
    facts: dict = {}
    if monitor is not None:
        monitor.start()
        phase = (rng or random).uniform(0.0, monitor.period_s)
        t_end = time.perf_counter() + WARMUP_S + phase
        while time.perf_counter() < t_end:
            loop.step()
    _place_threads()
    try:
        cpu0 = other_threads_cpu_s()
        elapsed = loop.timed(steps)
        cpu1 = other_threads_cpu_s()
    finally:
        if monitor is not None:
            facts = monitor.stop()
    return steps / elapsed, elapsed, max(cpu1 - cpu0, 0.0), facts


def measure_abba(loop: Loop, monitor: Monitor, quartets: int, block_s: float,
                 min_periods: float = 2.0) -> dict:
    """ABBA quartets of ``monitor`` on and off; per-quartet slowdowns and thread CPU.

    A block lasts ``block_s`` or ``min_periods`` of the monitor's periods, whichever is longer.
    """
    block_s = max(block_s, min_periods * monitor.period_s)
    steps = loop.calibrate(block_s)
    rng = random.Random(0)
    slowdowns, on_rates, off_rates, facts = [], [], [], []
    on_wall = on_cpu = off_wall = off_cpu = 0.0
    for q in range(quartets):
        pattern = (True, False, False, True) if q % 2 == 0 else (False, True, True, False)
        rates = {True: [], False: []}
        for on in pattern:
            rate, wall, cpu, f = _block(loop, monitor if on else None, steps, rng)
            rates[on].append(rate)
            if on:
                on_wall, on_cpu = on_wall + wall, on_cpu + cpu
                facts.append(f)
            else:
                off_wall, off_cpu = off_wall + wall, off_cpu + cpu
        on_mean, off_mean = sum(rates[True]) / 2, sum(rates[False]) / 2
        slowdowns.append(slowdown_pct(off_mean, on_mean))
        on_rates += rates[True]
        off_rates += rates[False]
    lo, hi = median_interval(slowdowns)
    return {"steps_per_block": steps, "block_s": block_s, "quartets": quartets,
            "quartet_slowdown_pct": slowdowns,
            "slowdown_pct": median(slowdowns), "ci95_pct": [lo, hi],
            "on_steps_per_s": on_rates, "off_steps_per_s": off_rates,
            "threads_cpu_s_per_s_on": on_cpu / on_wall if on_wall else float("nan"),
            "threads_cpu_s_per_s_off": off_cpu / off_wall if off_wall else float("nan"),
            "monitor_facts": facts}


def measure_loop(loop: Loop, monitors: list[Monitor], quartets: int, block_s: float,
                 min_periods: float = 2.0) -> dict:
    """Every available monitor's ABBA figures on ``loop``; unavailable ones with their reason."""
    arms: dict[str, dict] = {}
    for m in monitors:
        if not m.available:
            continue
        try:
            arms[m.name] = measure_abba(loop, m, quartets, block_s, min_periods)
        except Exception as exc:  # a monitor that cannot run here is reported, not fatal
            m.available, m.reason = False, f"failed: {type(exc).__name__}: {exc}"
    return {"arms": arms, "skipped": {m.name: m.reason for m in monitors if not m.available}}


def _contains_zero(ci: list[float]) -> bool:
    return ci[0] <= 0.0 <= ci[1]


def monitor_targets(out: Outcome, name: str, arm: dict, naive_pct: float, label: str,
                    distrust: str | None = None) -> None:
    """The issue's two targets for one monitor's arm: its slowdown ≤ 0.5 %, and ≤ ⅓ of naive
    50 Hz polling's (``naive_pct``); ``distrust`` says why the run's method is biased, if it is."""
    lo, hi = arm["ci95_pct"]
    note = f"95 % interval [{lo:+.3f}, {hi:+.3f}] %"
    if distrust:
        note += f"; {distrust}, so this run's method is biased"
    out.targets.append(Target(f"{name} slowdown, {label}", arm["slowdown_pct"], "%", "<=",
                              LAUNCH_TARGET_PCT, note=note))
    ratio = arm["slowdown_pct"] / naive_pct if naive_pct > 0 else float("nan")
    out.targets.append(Target(f"{name} slowdown / naive 50 Hz slowdown, {label}", ratio, "", "<=",
                              round(NAIVE_FRACTION_TARGET, 4),
                              note="" if naive_pct > 0 else "naive polling showed no slowdown: no ratio"))


def _targets(out: Outcome, label: str, launch: dict, compute: dict) -> None:
    la, ca = launch["arms"], compute["arms"]
    control = la.get("control")
    trusted = control is not None and _contains_zero(control["ci95_pct"])
    if control is not None:
        lo, hi = control["ci95_pct"]
        out.targets.append(Target(f"control arm's 95 % interval contains 0, launch-bound{label}",
                                  1.0 if trusted else 0.0, "", ">=", 1.0,
                                  note=f"control: {control['slowdown_pct']:+.3f} % [{lo:+.3f}, {hi:+.3f}]"))
    naive = la.get("naive_50hz", {}).get("slowdown_pct", float("nan"))
    for mon in ("nbgpu", "nbgpu_panel"):
        if mon not in la:
            continue
        monitor_targets(out, mon, la[mon], naive, f"launch-bound{label}",
                        None if trusted else "the control arm's interval excludes 0")
        if mon in ca:
            c = ca[mon]
            out.figure(f"{mon} slowdown, compute-bound{label} (95 % interval "
                       f"{c['ci95_pct'][0]:+.3f} … {c['ci95_pct'][1]:+.3f})", c["slowdown_pct"], "%")
    for name, arm in la.items():
        if name not in ("nbgpu", "nbgpu_panel"):
            lo, hi = arm["ci95_pct"]
            out.figure(f"{name} slowdown, launch-bound{label} (95 % interval {lo:+.3f} … {hi:+.3f})",
                       arm["slowdown_pct"], "%")
        out.figure(f"{name} threads' CPU (upper bound on GIL held), launch-bound{label}",
                   arm["threads_cpu_s_per_s_on"] - arm["threads_cpu_s_per_s_off"], "CPU s/s")


def _pin_two_cpus() -> tuple[set[int] | None, list[int]]:
    """Pin this process to two of its CPUs, the loop's thread alone on the first (see
    ``_place_threads``); returns (previous set, pinned CPUs)."""
    try:
        before = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None, []
    cpus = sorted(before)[-2:]
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        return None, []
    if len(cpus) == 2:
        _placement.update(loop=cpus[0], others=cpus[1])
    return before, cpus


def overhead(gpus: list[int], devices: list[str], quick: bool, nvml=None, source: object = "nvml",
             label: str = "") -> Outcome:
    """Measure both loops on ``devices`` with monitors watching ``gpus``; build the outcome."""
    quartets = {LaunchBound: 4, ComputeBound: 2} if quick else {LaunchBound: 24, ComputeBound: 8}
    if os.environ.get("NBGPU_BENCH_QUARTETS"):
        quartets = dict.fromkeys(quartets, int(os.environ["NBGPU_BENCH_QUARTETS"]))
    block_s = {LaunchBound: 0.1, ComputeBound: 0.2} if quick else {LaunchBound: 0.25, ComputeBound: 0.3}
    wanted = [n.strip() for n in os.environ.get("NBGPU_BENCH_LOOPS", "").split(",") if n.strip()]
    loops = [c for c in (LaunchBound, ComputeBound) if not wanted or c.name in wanted]
    monitors = monitors_for(gpus, nvml, source)
    before, pinned = _pin_two_cpus()
    raw: dict = {"method": "ABBA quartets of short blocks, median of per-quartet slowdowns, "
                           "order-statistic 95 % interval",
                 "quartets": {c.__name__: n for c, n in quartets.items()},
                 "block_s": {c.__name__: s for c, s in block_s.items()},
                 "warmup_s": WARMUP_S, "devices": devices, "monitored_gpus": gpus, "pinned_cpus": pinned}
    results = {}
    try:
        for cls in loops:
            loop = cls(devices)
            res = measure_loop(loop, monitors, quartets[cls], block_s[cls], 0.5 if quick else 2.0)
            res["about"] = loop.about
            results[loop.name] = res
            raw[loop.name] = res
            del loop
    finally:
        _placement.clear()
        if before is not None:
            for tid in os.listdir("/proc/self/task"):
                try:
                    os.sched_setaffinity(int(tid), before)
                except OSError:
                    continue
    out = Outcome(raw=raw)
    empty = {"arms": {}}
    _targets(out, label, results.get("launch_bound", empty), results.get("compute_bound", empty))
    if len(loops) < 2:
        out.notes.append("run limited to " + ", ".join(c.name for c in loops) + " (NBGPU_BENCH_LOOPS)")
    for m in monitors:
        if not m.available:
            out.notes.append(f"{m.name}: not measured ({m.reason})")
    return out


def run_one_gpu(ctx: Context) -> Outcome:
    """Both loops on GPU 0; monitors watch GPU 0."""
    return overhead([0], ["cuda:0"], ctx.quick)


def run_two_gpus(ctx: Context) -> Outcome:
    """Both loops on GPUs 0 and 1 at once (one process issues each step to both)."""
    if ctx.gpus.torch_cuda_devices < 2 or len(ctx.gpus.names) < 2:
        raise UnavailableError(f"needs 2 GPUs, this machine has {ctx.gpus.torch_cuda_devices}")
    return overhead([0, 1], ["cuda:0", "cuda:1"], ctx.quick, label=", 2 GPUs")
