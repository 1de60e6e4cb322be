"""Benchmark: how much each monitor slows the loop's main thread, from the steps its threads ran in.

The ABBA benchmark (``gpu_overhead``) compares whole blocks with and without a monitor; on
the H200 the launch-bound loop's own speed moves between 1,130 and 2,110 steps/s from one
0.25 s block to the next, so its control arm spans several percent. This one attributes
lost time to the moments a monitor thread actually ran instead, and compares each such
step with the loop's own speed just around it, so slow drift cancels:

1. The loop runs for a long span with the monitor on. After every step the loop's thread
   stores the time (``perf_counter_ns``) and the summed CPU clock of the monitor's threads
   (those that appeared when it started; one ``clock_gettime`` per thread per step; what
   that costs a step is measured and reported). A step during which that clock advanced is
   *touched*, and so are the ``spill_steps`` after it (GIL hand-back, cold caches).
2. A touched step's excess is its duration minus the mean duration of the untouched steps
   within ±``window_s`` of it. The mean, not the median: step times are skewed, and a
   median baseline would count ordinary jitter as excess. The first step of each run of
   touched steps also loses var/mean of its neighbours, and each later one their lag-1
   autocovariance/mean: a step is touched with a chance in proportion to its length
   (length bias), which with no effect at all makes it, and where speed drifts its
   followers, longer than the mean.
3. Slowdown % = total excess / (wall − total excess) × 100, with a 95 % interval from a
   circular block bootstrap of per-second excesses (blocks of 2 s): per-second excesses are
   skewed (a second holding a costly read has a large one), so a t-interval over segments
   would be off; 2 s blocks keep neighbouring seconds, which share baseline windows,
   together, while leaving enough blocks (longer blocks gave narrower, under-covering
   intervals on synthetic series: ``benchmarks/synthetic_steps.py``).

Arms: ``control`` (a thread waking every 1 s, the sampler's interval, doing nothing but
take the GIL to return from its wait: its interval must contain 0, or lie within ±0.05 %,
or the run's method is biased), ``nbgpu``, ``nbgpu_watched`` (its buffers drained as a
panel keeps them: the panel arm less its refresh), ``nbgpu_panel``, ``naive_50hz``,
``nvitop`` (the monitors of ``monitors.py``), and ``null_50hz``: a child process waking every 20 ms, kept
off the loop's CPU, whose CPU clock marks steps as a thread's would; it cannot take the
GIL, so its figure is the method's own bias at naive polling's rate (the same 50 Hz wake-ups
in a thread of the process do cost the loop a GIL hand-over each: not a null). Beside each:
its threads' CPU seconds per second, an upper bound on the GIL they held (NVML calls
release it), a second, low-noise figure.

What the method cannot see: a cost spread evenly in time rather than tied to when a monitor
thread runs. Garbage collections that a monitor's allocations bring forward but that run
in the loop's thread; a GPU-side slowdown (clocks, memory traffic, NVML locking in the
driver) that does not end with the monitor's CPU burst; an effect lasting longer than
``spill_steps`` steps (it moves the baseline up with it and is then under-counted, see the
spill sensitivity in the results); a monitor thread started after the snapshot (reported as
"late threads"). The loop thread's own GC time per second is reported per arm, and the
figures are set beside the newest ABBA figures of the same device where a results file has
them: the ABBA method sees evenly spread costs, with far wider intervals.

``NBGPU_BENCH_SECONDS`` (per arm), ``NBGPU_BENCH_ARMS`` (comma-separated) and
``NBGPU_BENCH_PIN=0`` (no CPU pinning) shape a run; the results record what was used.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from . import REPO_ROOT
from .gpu_loops import CpuSmallOps, LaunchBound, Loop
from .gpu_overhead import monitor_targets
from .monitors import (
    Monitor,
    NaivePollMonitor,
    NbgpuMonitor,
    NbgpuPanelMonitor,
    NbgpuWatchedMonitor,
    NvitopMonitor,
    ThreadMonitor,
)
from .registry import Context
from .report import Outcome, Target
from .stats import excess_slowdown
from .step_recorder import ThreadClocks, place_threads, record_steps, recording_cost_ns, thread_ids

CONTROL_NEGLIGIBLE_PCT = 0.05  # a control interval inside ±this counts as unbiased
WINDOW_S = 0.2
SPILL_STEPS = 2
BLOCK_S = 2.0  # bootstrap block length: see docs/performance.md for the coverage it gives
SENSITIVITY = [(0, WINDOW_S), (1, WINDOW_S), (4, WINDOW_S), (SPILL_STEPS, 0.1), (SPILL_STEPS, 0.5)]
ARMS = ("control", "nbgpu", "nbgpu_watched", "nbgpu_panel", "naive_50hz", "nvitop", "null_50hz")
SECONDS = {"gpu": 45.0, "cpu": 10.0, "quick": 3.0}
CANNOT_SEE = ("cannot see costs spread evenly in time rather than tied to a monitor thread's bursts "
              "(GC debt collected in the loop's thread, GPU-side slowdowns outlasting the burst, "
              f"effects longer than {SPILL_STEPS} steps, threads started after the snapshot)")


class PeriodicControlMonitor(ThreadMonitor):
    """A thread that wakes every ``period_s`` and does nothing else: the method's bias check."""

    def __init__(self, period_s: float, name: str = "control") -> None:
        super().__init__()
        self.period_s, self.name, self.wakes = period_s, name, 0

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self._work()
            self.wakes += 1

    def _work(self) -> None:
        """What a wake-up does: nothing (the control); a subclass may read something here."""

    def start(self) -> None:
        self.wakes = 0
        self._start_thread(self._run, f"{self.name}-monitor")

    def stop(self) -> dict:
        self._end_thread()
        return {"wakes": self.wakes, "period_s": self.period_s}


class NullProcessMonitor(Monitor):
    """A child process that wakes every ``period_s`` and does nothing, on CPUs other than the loop's.

    It cannot take the loop's GIL, so the true excess of the steps it runs in is nil: what
    the method reports for it is the method's own bias (length bias above all) at that rate.
    Its process CPU clock is watched as a monitor thread's would be.
    """

    def __init__(self, period_s: float = 0.02, name: str = "null_50hz") -> None:
        self.period_s, self.name = period_s, name
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        code = f"import time\nwhile True:\n    time.sleep({self.period_s!r})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)

    def clocks(self) -> list[tuple[int, str]]:
        """(clock id, name) of what to watch besides the monitor's threads: the child's CPU clock."""
        return [] if self.proc is None else [((~self.proc.pid << 3) | 2, f"{self.name} child process")]

    def place(self, cpus: set[int]) -> None:
        """Keep the child off the loop's CPU."""
        if self.proc is not None:
            os.sched_setaffinity(self.proc.pid, cpus)

    def stop(self) -> dict:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait(timeout=5)
        return {"period_s": self.period_s}


def arm_factories(gpus: list[int] | None, nvml: Callable[[], object] | None,
                  source: Callable[[], object]) -> dict[str, Callable[[], Monitor]]:
    """A fresh monitor for each arm; ``nvml``/``source`` make the NVML module and sampler source."""
    def naive() -> Monitor:
        return NaivePollMonitor(nvml() if nvml else None, gpus)

    return {"control": lambda: PeriodicControlMonitor(NbgpuMonitor.period_s),
            "nbgpu": lambda: NbgpuMonitor(source(), gpus),
            "nbgpu_watched": lambda: NbgpuWatchedMonitor(source(), gpus),
            "nbgpu_panel": lambda: NbgpuPanelMonitor(source(), gpus),
            "naive_50hz": naive,
            "nvitop": NvitopMonitor,
            "null_50hz": lambda: NullProcessMonitor(NaivePollMonitor.period_s)}


class _LoopGc:
    """Time the garbage collector spends in the calling thread while entered (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.me = threading.get_ident()
        self.collections, self.seconds, self._t0 = 0, 0.0, 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if threading.get_ident() != self.me:
            return
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.collections += 1
            self.seconds += time.perf_counter() - self._t0

    def __enter__(self) -> _LoopGc:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def _run_for(loop: Loop, seconds: float) -> float:
    """Run the loop for ``seconds``; its steps per second."""
    n, t0 = 0, time.perf_counter()
    end = t0 + seconds
    while (t := time.perf_counter()) < end or n == 0:
        loop.step()
        n += 1
    return n / max(t - t0, 1e-9)


def _brief(res: dict) -> dict:
    return {k: res[k] for k in ("spill_steps", "window_s", "slowdown_pct", "ci95_pct", "touched_fraction")}


def analyse(end_ns: Sequence[int], cpu_ns: Sequence[int]) -> dict:
    """The arm's figure at the default window and spill, their sensitivity, and the biased variants."""
    wall_s = (int(end_ns[-1]) - int(end_ns[0])) / 1e9
    seg = {"segment_s": min(1.0, max(0.1, wall_s / 20))}  # short (quick) runs: rougher intervals
    seg["block"] = max(1, round(BLOCK_S / seg["segment_s"]))
    res = excess_slowdown(end_ns, cpu_ns, WINDOW_S, SPILL_STEPS, **seg)
    res["sensitivity"] = [_brief(excess_slowdown(end_ns, cpu_ns, w, s, resamples=500, **seg))
                          for s, w in SENSITIVITY]
    res["median_baseline_slowdown_pct"] = excess_slowdown(end_ns, cpu_ns, WINDOW_S, SPILL_STEPS,
                                                          baseline="median", resamples=10,
                                                          **seg)["slowdown_pct"]
    res["no_length_bias_slowdown_pct"] = excess_slowdown(end_ns, cpu_ns, WINDOW_S, SPILL_STEPS,
                                                         length_bias=False, resamples=10,
                                                         **seg)["slowdown_pct"]
    return res


def measure_arm(loop: Loop, monitor: Monitor, seconds: float, warmup_s: float,
                placement: tuple[int, set[int]] | None) -> dict:
    """Start ``monitor``, warm up, record ``seconds`` of steps, stop it; the arm's figures."""
    gc.collect()
    before = thread_ids()
    monitor.start()
    try:
        rate = _run_for(loop, warmup_s)
        clocks = ThreadClocks.new_since(before)
        for clock, name in getattr(monitor, "clocks", list)():
            clocks.clocks.append(clock)
            clocks.names.append(name)
        if placement is not None:
            place_threads(*placement)
            getattr(monitor, "place", lambda cpus: None)(placement[1])
        cost_ns = recording_cost_ns(clocks.clocks)
        loop.sync()
        with _LoopGc() as loop_gc:
            rec = record_steps(loop.step, clocks.clocks, seconds, int(rate * seconds * 3) + 10_000)
        loop.sync()
        late = ThreadClocks.new_since(before | set(clocks.tids))
        late_cpu_s = late.total_ns() / 1e9
    finally:
        facts = monitor.stop()
    res = analyse(rec.end_ns, rec.cpu_ns)
    wall = res["wall_s"]
    cpu_s = (int(rec.cpu_ns[-1]) - int(rec.cpu_ns[0])) / 1e9
    res.update(threads=clocks.names, threads_cpu_s_per_s=cpu_s / wall,
               thread_cpu_s_per_s=per_thread(clocks.names, [rec.first_ns.get(c) for c in clocks.clocks],
                                             [rec.last_ns.get(c) for c in clocks.clocks], wall),
               recording_cost_ns_per_step=cost_ns,
               recording_cost_pct=100.0 * cost_ns / 1e9 / res["mean_step_s"],
               loop_gc_collections=loop_gc.collections, loop_gc_s_per_s=loop_gc.seconds / wall,
               late_threads=late.names, late_threads_cpu_s=late_cpu_s, truncated=rec.truncated,
               threads_ended=rec.threads_ended, warmup_steps_per_s=rate, monitor_facts=facts)
    return res


def per_thread(names: list[str], first_ns: list, last_ns: list, wall_s: float) -> dict[str, float]:
    """CPU seconds per second of each watched thread over the recording, from the clock
    readings the step recorder made at its start and end (so they sum to its figure); threads
    of one name summed, one that ended meanwhile left out."""
    out: dict[str, float] = {}
    for name, a, b in zip(names, first_ns, last_ns, strict=True):
        if a is not None and b is not None and wall_s > 0:
            out[name] = out.get(name, 0.0) + (b - a) / 1e9 / wall_s
    return out


def _placement() -> tuple[tuple[int, set[int]] | None, set[int] | None]:
    """(loop CPU, other CPUs) to pin to, and the affinity to restore; None where not pinning."""
    if os.environ.get("NBGPU_BENCH_PIN", "1") == "0":
        return None, None
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None, None
    if len(allowed) < 2:
        return None, None
    loop_cpu = max(allowed)
    return (loop_cpu, allowed - {loop_cpu}), allowed


def _restore(allowed: set[int] | None) -> None:
    if allowed is None:
        return
    for tid in thread_ids():
        try:
            os.sched_setaffinity(tid, allowed)
        except OSError:
            continue


def wanted_arms() -> list[str]:
    """The arms to run: ``NBGPU_BENCH_ARMS`` (comma-separated) or all of them."""
    names = [n.strip() for n in os.environ.get("NBGPU_BENCH_ARMS", "").split(",") if n.strip()]
    unknown = sorted(set(names) - set(ARMS))
    if unknown:
        raise ValueError(f"NBGPU_BENCH_ARMS: unknown arm(s) {', '.join(unknown)}; known: {', '.join(ARMS)}")
    return names or list(ARMS)


def arm_seconds(kind: str, quick: bool) -> float:
    """Recording seconds per arm: ``NBGPU_BENCH_SECONDS`` or the default for the kind of run."""
    if os.environ.get("NBGPU_BENCH_SECONDS"):
        return float(os.environ["NBGPU_BENCH_SECONDS"])
    return SECONDS["quick" if quick else kind]


def measure_all(loop: Loop, factories: dict[str, Callable[[], Monitor]], arms: list[str],
                seconds: float, warmup_s: float) -> dict:
    """Every arm in turn; an arm that cannot run or fails is reported with its reason, the rest go on."""
    placement, allowed = _placement()
    out: dict = {"arms": {}, "skipped": {}, "pinned": placement is not None}
    try:
        for name in arms:
            try:
                monitor = factories[name]()
                if not monitor.available:
                    out["skipped"][name] = monitor.reason
                    continue
                out["arms"][name] = measure_arm(loop, monitor, seconds, warmup_s, placement)
            except Exception as exc:  # one arm's failure is its own
                out["skipped"][name] = f"failed: {type(exc).__name__}: {exc}"
    finally:
        _restore(allowed)
    return out


def _ci(arm: dict) -> str:
    lo, hi = arm["ci95_pct"]
    return f"{arm['slowdown_pct']:+.3f} % [{lo:+.3f}, {hi:+.3f}]"


def _unbiased(arm: dict) -> bool | None:
    """Whether a null arm's interval shows no bias (None: no interval, too few segments)."""
    lo, hi = arm["ci95_pct"]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return None
    return lo <= 0.0 <= hi or (lo >= -CONTROL_NEGLIGIBLE_PCT and hi <= CONTROL_NEGLIGIBLE_PCT)


def abba_reference(device: str, results_dir: Path | None = None) -> tuple[str, dict] | None:
    """(file name, launch-bound ABBA arms) of the newest results file of ``device`` that has them."""
    folder = results_dir or REPO_ROOT / "benchmarks" / "results"
    chosen = os.environ.get("NBGPU_BENCH_ABBA")
    paths = [chosen] if chosen else sorted(str(p) for p in folder.glob("*.json"))
    best: tuple[str, str, dict] | None = None
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
            rec = doc["benchmarks"]["gpu_overhead"]
            arms = rec["raw"]["launch_bound"]["arms"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if rec.get("status") != "ok" or (not chosen and doc.get("device") != device):
            continue
        if not any(None not in (a.get("ci95_pct") or [None]) for a in arms.values()):
            continue
        started = str(doc.get("started_utc", ""))
        if best is None or started > best[0]:
            best = (started, os.path.basename(path), arms)
    return None if best is None else (best[1], best[2])


def cross_check(arms: dict, reference: tuple[str, dict] | None) -> list[str]:
    """One note per arm measured both ways: both intervals, and whether they overlap."""
    if reference is None:
        return ["no ABBA figures of this device and loop to cross-check against"]
    name, abba = reference
    notes = []
    for arm, res in arms.items():
        other = abba.get(arm)
        if not other or None in (other.get("ci95_pct") or [None]):
            continue
        alo, ahi = other["ci95_pct"]
        lo, hi = res["ci95_pct"]
        overlap = not (hi < alo or ahi < lo)
        notes.append(f"{arm}: this method {_ci(res)}; ABBA ({name}) {other['slowdown_pct']:+.3f} % "
                     f"[{alo:+.3f}, {ahi:+.3f}]: intervals {'overlap' if overlap else 'do NOT overlap'}")
    return notes


def build_outcome(result: dict, label: str, real: bool, reference: tuple[str, dict] | None,
                  raw_extra: dict) -> Outcome:
    """Targets, figures and notes of one interference run."""
    arms = result["arms"]
    out = Outcome(raw={"method": "step-attributed excess over a ±window mean of untouched steps, "
                                 "circular block bootstrap of per-second excesses",
                       "window_s": WINDOW_S, "spill_steps": SPILL_STEPS, **raw_extra, **result})
    trusted = True
    for name in ("control", "null_50hz"):
        if name in arms:
            ok = _unbiased(arms[name])
            trusted = trusted and ok is not False
            out.targets.append(Target(f"{name} arm's 95 % interval contains 0 or lies within "
                                      f"±{CONTROL_NEGLIGIBLE_PCT} %, {label}",
                                      float("nan") if ok is None else float(ok), "", ">=", 1.0,
                                      note=f"{name}: {_ci(arms[name])}"))
    naive = arms.get("naive_50hz", {}).get("slowdown_pct", float("nan"))
    for name, arm in arms.items():
        lo, hi = arm["ci95_pct"]
        if real and name in ("nbgpu", "nbgpu_panel"):
            monitor_targets(out, name, arm, naive, label,
                            None if trusted else "a control arm's interval excludes 0")
        else:
            out.figure(f"{name} slowdown, {label} (95 % interval {lo:+.3f} … {hi:+.3f})",
                       arm["slowdown_pct"], "%")
        out.figure(f"{name} threads' CPU (upper bound on GIL held), {label}", arm["threads_cpu_s_per_s"],
                   "CPU s/s")
    if arms:
        worst = max(arms.values(), key=lambda a: a["recording_cost_pct"])
        out.figure(f"recording cost per step (worst arm, {len(worst['threads'])} clock(s)), {label}",
                   worst["recording_cost_ns_per_step"], "ns")
    out.notes += _notes(arms, result["skipped"], reference)
    return out


def _threads(arm: dict) -> str:
    """The arm's threads, each with its CPU ms per second where the run has it."""
    each = arm.get("thread_cpu_s_per_s") or {}
    return ", ".join(f"{n} {1000 * each[n]:.2f} ms/s" if n in each else n
                     for n in dict.fromkeys(arm["threads"])) or "none found"


def _notes(arms: dict, skipped: dict, reference: tuple[str, dict] | None) -> list[str]:
    notes = [f"the method {CANNOT_SEE}; the ABBA benchmark sees them, with wider intervals"]
    notes += cross_check(arms, reference)
    for name, arm in arms.items():
        sens = ", ".join(f"spill {s['spill_steps']}/±{s['window_s']:g} s: {s['slowdown_pct']:+.3f} %"
                         for s in arm["sensitivity"])
        notes.append(f"{name}: {arm['touched_fraction']:.1%} of {arm['steps']} steps touched; "
                     f"median baseline would say {arm['median_baseline_slowdown_pct']:+.3f} %, "
                     f"no length-bias correction {arm['no_length_bias_slowdown_pct']:+.3f} %; {sens}; "
                     f"loop-thread GC "
                     f"{1000 * arm['loop_gc_s_per_s']:.3f} ms/s; recording {arm['recording_cost_pct']:.2f} % "
                     f"of a step; threads: {_threads(arm)}")
        if arm["late_threads"]:
            notes.append(f"{name}: threads started after the snapshot, not attributed: "
                         f"{', '.join(arm['late_threads'])} ({arm['late_threads_cpu_s']:.3f} CPU s)")
        if arm["unbaselined_steps"]:
            notes.append(f"{name}: {arm['unbaselined_steps']} touched steps had too few untouched "
                         "neighbours for a baseline and count no excess")
        if arm["truncated"]:
            notes.append(f"{name}: the step arrays filled before the span ended (shorter span)")
    notes += [f"{name}: not measured ({why})" for name, why in skipped.items()]
    return notes


def run_gpu(ctx: Context) -> Outcome:
    """The launch-bound loop on GPU 0, each arm's monitors watching GPU 0."""
    seconds, arms = arm_seconds("gpu", ctx.quick), wanted_arms()
    factories = arm_factories([0], None, lambda: "nvml")
    result = measure_all(LaunchBound(["cuda:0"]), factories, arms, seconds, 0.5 if ctx.quick else 1.0)
    device = ", ".join(ctx.gpus.names)
    return build_outcome(result, "launch-bound", True, abba_reference(device),
                         {"loop": LaunchBound.about, "seconds_per_arm": seconds, "arms_wanted": arms})


def run_simulated(ctx: Context) -> Outcome:
    """The CPU loop (small numpy ops), monitors watching one simulated GPU: the method, anywhere."""
    import nbgpu

    seconds, arms = arm_seconds("cpu", ctx.quick), wanted_arms()
    factories = arm_factories([0], lambda: nbgpu.SimulatedGPUs(count=1, seed=0),
                              lambda: nbgpu.SimulatedGPUs(count=1, seed=0))
    result = measure_all(CpuSmallOps(), factories, arms, seconds, 0.5 if ctx.quick else 1.0)
    out = build_outcome(result, "CPU loop, simulated GPU", False, None,
                        {"loop": CpuSmallOps.about, "seconds_per_arm": seconds, "arms_wanted": arms})
    out.notes.append("Simulated GPUs compute their readings in Python holding the GIL, unlike real NVML "
                     "calls; these figures test the method, not nbgpu's cost on a GPU.")
    return out
