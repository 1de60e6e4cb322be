"""The stack sampler's cost: the sampler thread's CPU while a capture is open, with and
without main-thread stack samples (``nbgpu.diagnostics.stacks``), and with none open.

The main thread runs a torch model's forward pass in a loop (a numpy loop under a few
Python frames where torch is missing), so each sample walks a realistic stack. Arms
alternate (off, on, control, ...) so drift hits them alike; each arm's figure is the
sampler thread's CPU seconds per wall second (``threadcpu.ThreadCpuProbe``).

The thread CPU spent inside the stack listener is also timed directly (a thread-CPU
timer around it). Positive control: the same capture with stack samples off and a listener that burns a known
0.3 ms of thread CPU per wall second; the method must see that as about 0.3 ms/s more than
"off", or its "on minus off" figure means nothing.
"""

from __future__ import annotations

import statistics
import threading
import time

from .registry import Context
from .report import Outcome, Target
from .threadcpu import SectionTimers, ThreadCpuProbe

TARGET_MS_PER_S = 0.3
CONTROL_MS_PER_S = 0.3


class _Burn:
    """A sampler listener that spends ``ms_per_s`` of thread CPU per wall second."""

    def __init__(self, ms_per_s: float) -> None:
        self.rate = ms_per_s / 1000.0
        self.last: float | None = None

    def __call__(self, _sampler, _now: float) -> None:
        wall = time.perf_counter()
        if self.last is None:
            self.last = wall
            return
        owed, self.last = (wall - self.last) * self.rate, wall
        end = time.thread_time() + owed
        while time.thread_time() < end:
            pass


def _workload(stop: threading.Event, cuda: bool = False):
    """The main thread's loop: a small model's forward pass (on the GPU with ``cuda`` where
    torch sees one), or numpy under 8 frames without torch."""
    try:
        import torch

        device = "cuda" if cuda and torch.cuda.is_available() else "cpu"
        model = torch.nn.Sequential(*[torch.nn.Linear(128, 128) for _ in range(4)]).to(device)
        x = torch.rand(32, 128, device=device)

        def step():
            with torch.no_grad():
                model(x)
    except ImportError:
        import numpy as np

        a = np.random.default_rng(0).random((64, 64))

        def step(depth: int = 8):
            return step(depth - 1) if depth else a @ a

    while not stop.is_set():
        step()


def _arm(sampler, seconds: float, mode: str, cuda: bool = False) -> dict:
    """One arm: "off", "on" (stack samples), "control" (off plus a known burn) or "closed"."""
    import nbgpu
    from nbgpu.diagnostics import stacks

    got = stacks.samples_of(sampler, create=True)
    got.period_s = 1.0 / 40 if mode == "on" else float("inf")
    before = got.sampled
    probe = ThreadCpuProbe()
    timers = SectionTimers()  # the thread CPU inside the stack listener itself, directly
    timers.wrap(stacks.StackSamples, "__call__", "stacks")
    burn = _Burn(CONTROL_MS_PER_S) if mode == "control" else None
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    cap = None if mode == "closed" else nbgpu.capture(sampler=sampler).start()
    if burn is not None:
        sampler.add_listener(burn)
    sampler.add_listener(probe)
    timer.start()
    try:
        _workload(stop, cuda)  # the main thread works while the sampler thread samples it
    finally:
        sampler.remove_listener(probe)
        if burn is not None:
            sampler.remove_listener(burn)
        if cap is not None:
            cap.finish()
        timers.undo()
    res = probe.result()
    res["samples"] = got.sampled - before
    res["listener_cpu_s"] = timers.cpu_ns["stacks"] / 1e9
    return res


def _run(ctx: Context, source: object, label: str, cuda: bool = False) -> Outcome:
    import nbgpu

    seconds, rounds = (3.0, 1) if ctx.quick else (10.0, 3)
    sampler = nbgpu.Sampler(source=source).start()
    arms: dict[str, list[dict]] = {"off": [], "on": [], "control": [], "closed": []}
    try:
        _arm(sampler, 1.0, "on", cuda)  # warm-up: imports, CUDA, the classifier's caches
        for _ in range(rounds):
            for mode in arms:
                arms[mode].append(_arm(sampler, seconds, mode, cuda))
    finally:
        sampler.stop()

    def ms(mode: str) -> float:
        return 1000.0 * statistics.median(r["cpu_s_per_s"] for r in arms[mode])

    out = Outcome(raw={"arms": arms, "seconds": seconds, "rounds": rounds, "source": label})
    extra, control = ms("on") - ms("off"), ms("control") - ms("off")
    on = [r for r in arms["on"] if r.get("wall_s")]
    inside = 1000.0 * statistics.median(r["listener_cpu_s"] / r["wall_s"] for r in on)
    rate = statistics.median(r["samples"] / r["wall_s"] for r in arms["on"] if r.get("wall_s"))
    for mode in arms:
        out.figure(f"sampler thread CPU, capture {mode}, {label}", ms(mode), "ms/s")
    out.figure(f"stack samples a second, {label}", rate, "1/s")
    out.figure(f"positive control: known {CONTROL_MS_PER_S} ms/s seen as", control, "ms/s")
    out.figure(f"thread CPU on minus off, {label}", extra, "ms/s")
    out.targets.append(Target(f"stack sampling's CPU while a cell runs (inside its listener), {label}",
                              inside, "ms/s", "<=", TARGET_MS_PER_S))
    out.targets.append(Target(f"the same as on minus off, {label}", extra, "ms/s", "<=", TARGET_MS_PER_S,
                              note="valid only where the positive control is met"))
    out.targets.append(Target(f"stack samples while no capture is open, {label}",
                              float(sum(r["samples"] for r in arms["closed"])), "samples", "<=", 0))
    out.targets.append(Target("positive control seen within half its size", abs(control - CONTROL_MS_PER_S),
                              "ms/s", "<=", CONTROL_MS_PER_S / 2))
    return out


def run_gpu(ctx: Context) -> Outcome:
    """On the real GPU (NVML)."""
    return _run(ctx, "nvml", "one GPU", cuda=True)


def run_simulated(ctx: Context) -> Outcome:
    """On one simulated GPU."""
    import nbgpu

    return _run(ctx, nbgpu.SimulatedGPUs(count=1, seed=0), "one simulated GPU")
