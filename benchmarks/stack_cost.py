"""The stack sampler's cost: thread CPU of the stack listener (``nbgpu.diagnostics.stacks``)
on the sampler's thread while a capture is open, and none while none is open.

The hook: the benchmark times every call of the sampler-thread listeners under test with
the thread's CPU clock (``time.thread_time_ns``, wrappers put on ``StackSamples.__call__``
and on a burn listener here, not in the product). Arms alternate, round after round (off,
on, control, closed, off, on, ...). "off": a capture open with stack samples off (no stack
listener); "on": samples 10 times a second (the default) (the stack listener is called at every step of
the sampler and samples when one is due); "control": "off" plus a known 0.3 ms of thread
CPU burned per wall second. The three carry the same burn listener, at a rate of 0 but in
the control, and "off" and "control" a do-nothing listener where "on" has the stack
listener (so the hook's own clock reads cost alike), so they differ by the stack listener
or the burn only. "closed": no capture (no listener may run, no sample be taken). Figures
are medians over rounds of each round's difference from its "off", with their spread. The control must come
out within 30 % of 0.3 ms/s, else the arm says the method failed and gives no "on minus
off". The sampler thread's whole CPU (``ThreadCpuProbe``) is shown beside it, for
information only: NVML reads make it too noisy to see 0.3 ms/s.

The main thread trains a small torch model (forward, backward, optimizer step) and then
iterates a ``DataLoader`` (numpy under a few frames where torch is missing), so each
sample walks a realistic stack. ``per_sample_us`` times single samples of that, from a
thread that sleeps between them as the sampler's thread does.
"""

from __future__ import annotations

import statistics
import threading
import time

from nbgpu.config import NbGpu

from .registry import Context
from .report import Outcome, Target
from .threadcpu import SectionTimers, ThreadCpuProbe

TARGET_MS_PER_S = 0.3
CONTROL_MS_PER_S = 0.3
CONTROL_TOLERANCE = 0.3  # the control must be seen within this fraction of its size
HZ = float(NbGpu.class_traits()["stack_samples_hz"].default_value)  # the default rate


class _Burn:
    """A sampler listener that spends ``ms_per_s`` of thread CPU per wall second (in chunks
    of at least 50 µs, paying back what each chunk overshot)."""

    def __init__(self, ms_per_s: float) -> None:
        self.rate = ms_per_s / 1000.0
        self.last: float | None = None
        self.debt_s = 0.0

    def __call__(self, _sampler, _now: float) -> None:
        wall = time.perf_counter()
        if self.last is None:
            self.last = wall
            return
        self.debt_s += (wall - self.last) * self.rate
        self.last = wall
        if self.debt_s < 50e-6:  # a rate of 0: always here
            return
        start = now = time.thread_time()
        while now < start + self.debt_s:
            now = time.thread_time()
        self.debt_s -= now - start


def _nothing(_sampler, _now: float) -> None:
    """A listener that does nothing."""


def _steps(cuda: bool = False):
    """A function doing one step of the main thread's work: alternately a training step of
    a small model (on the GPU with ``cuda`` where torch sees one) and a DataLoader batch."""
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset
    except ImportError:
        import numpy as np

        a = np.random.default_rng(0).random((64, 64))

        def step(depth: int = 8):
            return step(depth - 1) if depth else a @ a

        return step

    class Items(Dataset):
        def __len__(self) -> int:
            return 10**9

        def __getitem__(self, i: int):
            return torch.rand(64) * 2, i % 10

    device = "cuda" if cuda and torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU()),
                                torch.nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter(DataLoader(Items(), batch_size=32))
    count = [0]

    def step():
        count[0] += 1
        if count[0] % 2:
            x, y = next(batches)
        else:
            x, y = torch.rand(32, 64), torch.randint(0, 10, (32,))
        loss = torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def _work(stop: threading.Event, step) -> None:
    while not stop.is_set():
        step()


def _arm(sampler, seconds: float, mode: str, step) -> dict:
    """One arm: "off", "on" (stack samples), "control" (off plus a known burn) or "closed"."""
    import nbgpu
    from nbgpu.diagnostics import stacks

    got = stacks.samples_of(sampler, create=True)
    got.period_s = 1.0 / HZ if mode == "on" else float("inf")  # inf: a capture adds no listener
    before = got.sampled
    probe = ThreadCpuProbe()
    # Every arm but "closed" has a burn listener, of 0 but in the control: the hook times it
    # and the stack listener alike, so "off" and "on" differ by the stack listener only
    burn = {"fn": _Burn(CONTROL_MS_PER_S if mode == "control" else 0.0)}
    timers = SectionTimers()  # the hook: thread CPU of each listener call
    timers.wrap(stacks.StackSamples, "__call__", "listeners")
    timers.wrap(burn, "fn", "listeners")
    # Where no stack listener runs, a do-nothing one in its place: the hook's own clock
    # reads then cost the same in every arm
    stand_in = {"fn": _nothing}
    timers.wrap(stand_in, "fn", "listeners")
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    cap = None if mode == "closed" else nbgpu.capture(sampler=sampler).start()
    if cap is not None:
        sampler.add_listener(burn["fn"])
        if mode != "on":
            sampler.add_listener(stand_in["fn"])
    sampler.add_listener(probe)
    wall0 = time.perf_counter()
    timer.start()
    try:
        _work(stop, step)  # the main thread works while the sampler thread samples it
    finally:
        sampler.remove_listener(probe)
        sampler.remove_listener(burn["fn"])
        sampler.remove_listener(stand_in["fn"])
        wall = time.perf_counter() - wall0
        if cap is not None:
            cap.finish()
        timers.undo()
    res = probe.result()
    res["samples"] = got.sampled - before
    res["listener_cpu_s"] = timers.cpu_ns["listeners"] / 1e9
    res["listener_calls"] = timers.calls["listeners"]
    res["listener_ms_per_s"] = 1000.0 * res["listener_cpu_s"] / wall
    res["arm_wall_s"] = wall
    return res


def per_sample_us(seconds: float, step, hz: float = HZ) -> dict:
    """Thread CPU of single stack samples (µs: median, mean, count) of a main thread doing
    ``step``, taken by a thread that sleeps 1/``hz`` between them (its caches go cold)."""
    from nbgpu.diagnostics import stacks

    class Clock:
        def add_listener(self, fn) -> None:
            pass

        def remove_listener(self, fn) -> None:
            pass

        def now(self) -> float:
            return time.time()

    clock = Clock()
    token = stacks.hold(clock)  # hold() keys its samples by sampler: use the one it made
    got = stacks.samples_of(clock)
    costs: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            got._next_at = -float("inf")  # due now
            c0 = time.thread_time_ns()
            got(clock, 0.0)
            costs.append(time.thread_time_ns() - c0)
            time.sleep(1.0 / hz)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        step()
    stop.set()
    thread.join()
    stacks.release(clock, token)
    c0 = time.thread_time_ns()
    clock_ns = time.thread_time_ns() - c0  # the clock read's own cost, left in the figures
    kept = costs[len(costs) // 10:] or [0]
    return {"median_us": statistics.median(kept) / 1e3, "mean_us": statistics.fmean(kept) / 1e3,
            "samples": len(kept), "clock_read_us": clock_ns / 1e3}


def _spread(values: list[float]) -> str:
    return f"{min(values):.3f}..{max(values):.3f}"


def _run(ctx: Context, source: object, label: str, cuda: bool = False) -> Outcome:
    """Rounds of the four arms (about 50 s on "sim", 110 s on a GPU; a quick run 15 s)."""
    import nbgpu

    seconds, rounds = (2.0, 2) if ctx.quick else (5.0, 5) if cuda else (3.0, 4)
    step = _steps(cuda)
    micro = per_sample_us(2.0 if ctx.quick else 4.0, step)
    sampler = nbgpu.Sampler(source=source).start()
    arms: dict[str, list[dict]] = {"off": [], "on": [], "control": [], "closed": []}
    try:
        _arm(sampler, 1.0, "on", step)  # warm-up: imports, CUDA, the classifier's caches
        for _ in range(rounds):
            for mode in arms:
                arms[mode].append(_arm(sampler, seconds if mode != "closed" else seconds / 2, mode, step))
    finally:
        sampler.stop()

    def hook(mode: str) -> list[float]:
        return [r["listener_ms_per_s"] for r in arms[mode]]

    def whole(mode: str) -> list[float]:
        return [1000.0 * r["cpu_s_per_s"] for r in arms[mode]]

    # Paired by round (ABAB): each round's on/control minus the same round's off
    extra = [a - b for a, b in zip(hook("on"), hook("off"), strict=True)]
    control = [a - b for a, b in zip(hook("control"), hook("off"), strict=True)]
    extra_ms, control_ms = statistics.median(extra), statistics.median(control)
    method_ok = abs(control_ms - CONTROL_MS_PER_S) <= CONTROL_TOLERANCE * CONTROL_MS_PER_S
    on_samples = sum(r["samples"] for r in arms["on"])
    on_wall = sum(r["arm_wall_s"] for r in arms["on"])
    closed_samples = sum(r["samples"] for r in arms["closed"])
    out = Outcome(raw={"arms": arms, "seconds": seconds, "rounds": rounds, "source": label,
                       "per_sample": micro, "on_minus_off_ms_per_s": extra,
                       "control_minus_off_ms_per_s": control, "method_ok": method_ok})
    for mode in ("off", "on", "control"):
        out.figure(f"stack listener thread CPU, capture open, {mode}, {label} (median, min..max "
                   f"{_spread(hook(mode))})", statistics.median(hook(mode)), "ms/s")
        out.figure(f"sampler thread's whole CPU, {mode} (information only, min..max {_spread(whole(mode))})",
                   statistics.median(whole(mode)), "ms/s")
    rate = on_samples / on_wall if on_wall else 0.0
    out.figure(f"stack samples a second while on, {label}", rate, "1/s")
    out.figure(f"thread CPU a sample in the sampler (on minus off over samples a second), {label}",
               1000.0 * extra_ms / rate if rate else float("nan"), "us")
    out.figure(f"thread CPU a sample, microbenchmark (median; mean {micro['mean_us']:.1f}; "
               f"clock read {micro['clock_read_us']:.1f} included), {label}", micro["median_us"], "us")
    out.figure(f"positive control: known {CONTROL_MS_PER_S} ms/s seen as (min..max {_spread(control)})",
               control_ms, "ms/s")
    out.targets.append(Target("positive control recovered within 30 %", abs(control_ms - CONTROL_MS_PER_S),
                              "ms/s", "<=", CONTROL_TOLERANCE * CONTROL_MS_PER_S))
    out.targets.append(Target(f"stack sampling's CPU while a cell runs (on minus off, min..max "
                              f"{_spread(extra)}), {label}", extra_ms if method_ok else float("nan"),
                              "ms/s", "<=", TARGET_MS_PER_S,
                              note="" if method_ok else "method failed: positive control not recovered"))
    out.targets.append(Target(f"stack samples while no capture is open, {label}", float(closed_samples),
                              "samples", "<=", 0))
    out.targets.append(Target(f"stack listener CPU while no capture is open, {label}",
                              max(hook("closed")), "ms/s", "<=", 0))
    if not method_ok:
        out.notes.append(f"METHOD FAILED: the known {CONTROL_MS_PER_S} ms/s was seen as "
                         f"{control_ms:.3f} ms/s; on minus off is not reported as a result")
    return out


def run_gpu(ctx: Context) -> Outcome:
    """On the real GPU (NVML)."""
    return _run(ctx, "nvml", "one GPU", cuda=True)


def run_simulated(ctx: Context) -> Outcome:
    """On one simulated GPU."""
    import nbgpu

    return _run(ctx, nbgpu.SimulatedGPUs(count=1, seed=0), "one simulated GPU")
