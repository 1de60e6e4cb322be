"""Benchmark 1: slowdown of two training loops under each monitor, side by side in one run.

For each repeat, every monitor (in an order rotated per repeat) is started, the loop warms
up, a calibrated number of steps is timed between two device synchronisations, and the
monitor is stopped. A launch-bound loop's speed drifts by tens of percent between seconds
on a shared virtual machine, so the targets use paired slowdowns: within each repeat, each
monitor's rate against the no-monitor rate of the same repeat, then the median over
repeats. The process is pinned to two CPUs (the loop and the monitor's thread share them,
as in a notebook kernel) to cut scheduler noise; the unpaired medians are reported too.
"""

from __future__ import annotations

import os
import time

from .gpu_loops import ComputeBound, LaunchBound, Loop
from .monitors import Monitor, NaivePollMonitor, NbgpuMonitor, NbgpuPanelMonitor, NvitopMonitor
from .registry import Context
from .report import Outcome, Target, UnavailableError
from .stats import median, robust_sigma_pct, slowdown_pct

LAUNCH_TARGET_PCT = 0.5
NAIVE_FRACTION_TARGET = 1 / 3
WARMUP_S = 0.3


def monitors_for(gpus: list[int], nvml=None, source: object = "nvml") -> list[Monitor]:
    """The compared monitors, those unavailable here included (they are reported, not run)."""
    return [Monitor(), NbgpuMonitor(source, gpus), NbgpuPanelMonitor(source, gpus),
            NaivePollMonitor(nvml, gpus), NvitopMonitor()]


def measure_loop(loop: Loop, monitors: list[Monitor], repeats: int, seconds: float) -> dict:
    """Steps/s of ``loop`` under each available monitor, repeats alternating."""
    steps = loop.calibrate(seconds)
    runnable = [m for m in monitors if m.available]
    rates: dict[str, list[float]] = {m.name: [] for m in runnable}
    facts: dict[str, list[dict]] = {m.name: [] for m in runnable}
    order_log = []
    for r in range(repeats):
        order = runnable[r % len(runnable):] + runnable[: r % len(runnable)]
        order_log.append([m.name for m in order])
        for m in order:
            if not m.available:
                continue
            try:
                m.start()
            except Exception as exc:  # a monitor that cannot start here is reported, not fatal
                m.available, m.reason = False, f"failed to start: {type(exc).__name__}: {exc}"
                rates.pop(m.name, None)
                facts.pop(m.name, None)
                continue
            try:
                t_end = time.perf_counter() + WARMUP_S
                while time.perf_counter() < t_end:
                    loop.step()
                elapsed = loop.timed(steps)
            finally:
                facts[m.name].append(m.stop())
            rates[m.name].append(steps / elapsed)
    return {"steps_per_repeat": steps, "steps_per_s": rates, "monitor_facts": facts, "order": order_log,
            "skipped": {m.name: m.reason for m in monitors if not m.available}}


def summarise(name: str, res: dict) -> dict:
    """Medians, noise and slowdowns (vs no monitor) of one loop's rates."""
    rates = res["steps_per_s"]
    base = median(rates["none"])
    summary = {"median_steps_per_s": {k: median(v) for k, v in rates.items()},
               "noise_pct": robust_sigma_pct(rates["none"]),
               "slowdown_pct": {k: slowdown_pct(base, median(v)) for k, v in rates.items() if k != "none"}}
    paired = {}
    for k, v in rates.items():
        if k != "none":
            paired[k] = median([slowdown_pct(b, x) for b, x in zip(rates["none"], v, strict=True)])
    summary["paired_slowdown_pct"] = paired
    return summary


def _targets(out: Outcome, label: str, launch: dict, compute: dict) -> None:
    ls, cs = launch["paired_slowdown_pct"], compute["paired_slowdown_pct"]
    naive = ls.get("naive_50hz", float("nan"))
    for mon in ("nbgpu", "nbgpu_panel"):
        if mon not in ls:
            continue
        out.targets.append(Target(f"{mon} slowdown, launch-bound{label}", ls[mon], "%", "<=",
                                  LAUNCH_TARGET_PCT))
        noise = compute["noise_pct"]
        out.targets.append(Target(
            f"{mon} slowdown, compute-bound{label} (not measurable: <= 2x run-to-run noise)",
            cs.get(mon, float("nan")), "%", "<=", round(2 * noise, 4),
            note=f"noise = robust sigma of the no-monitor repeats, {noise:.3g} %"))
        ratio = ls[mon] / naive if naive > 0 else float("nan")
        note = "" if naive > 0 else "naive polling showed no slowdown in this run: ratio undefined"
        out.targets.append(Target(f"{mon} slowdown / naive 50 Hz slowdown, launch-bound{label}", ratio, "",
                                  "<=", round(NAIVE_FRACTION_TARGET, 4), note=note))
    out.figure(f"run-to-run noise (robust sigma), launch-bound{label}", launch["noise_pct"], "%")
    out.figure(f"run-to-run noise (robust sigma), compute-bound{label}", compute["noise_pct"], "%")
    for mon, v in ls.items():
        if mon not in ("nbgpu", "nbgpu_panel"):
            out.figure(f"{mon} slowdown, launch-bound{label}", v, "%")
    for mon, v in cs.items():
        if mon not in ("nbgpu", "nbgpu_panel"):
            out.figure(f"{mon} slowdown, compute-bound{label}", v, "%")
    for mon, v in launch["slowdown_pct"].items():
        out.figure(f"{mon} slowdown of medians (unpaired), launch-bound{label}", v, "%")


def _pin_two_cpus() -> tuple[set[int] | None, list[int]]:
    """Pin this process to two of its CPUs; returns (previous set, pinned CPUs)."""
    try:
        before = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return None, []
    cpus = sorted(before)[-2:]
    try:
        os.sched_setaffinity(0, cpus)
    except OSError:
        return None, []
    return before, cpus


def overhead(gpus: list[int], devices: list[str], quick: bool, nvml=None, source: object = "nvml",
             label: str = "") -> Outcome:
    """Measure both loops on ``devices`` with monitors watching ``gpus``; build the outcome."""
    repeats = {LaunchBound: 3, ComputeBound: 2} if quick else {LaunchBound: 15, ComputeBound: 5}
    seconds = 0.8 if quick else 1.0
    monitors = monitors_for(gpus, nvml, source)
    before, pinned = _pin_two_cpus()
    raw: dict = {"repeats": {c.__name__: n for c, n in repeats.items()}, "seconds_per_repeat": seconds,
                 "warmup_s": WARMUP_S, "devices": devices, "monitored_gpus": gpus, "pinned_cpus": pinned}
    summaries = {}
    try:
        for cls in (LaunchBound, ComputeBound):
            loop = cls(devices)
            res = measure_loop(loop, monitors, repeats[cls], seconds)
            res["about"] = loop.about
            summaries[loop.name] = summarise(loop.name, res)
            raw[loop.name] = dict(res, **summaries[loop.name])
            del loop
    finally:
        if before is not None:
            os.sched_setaffinity(0, before)
    out = Outcome(raw=raw)
    _targets(out, label, summaries["launch_bound"], summaries["compute_bound"])
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
