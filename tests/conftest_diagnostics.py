"""Helpers for the diagnostics tests: a fake clock and a sampler driven tick by tick."""

from __future__ import annotations

import numpy as np

from conftest import FakeClock
from nbgpu import Sampler
from nbgpu.sources.simulated import SimulatedGPUs


def sim_sampler(scenario: str = "steady", count: int = 2, thresholds=None, source=None,
                interval: float = 0.5, **kw) -> tuple[Sampler, FakeClock]:
    """A Sampler on simulated GPUs and a fake clock, not started (drive it with ``drive``)."""
    clock = FakeClock()
    sim = source if source is not None else SimulatedGPUs(count=count, scenario=scenario, clock=clock)
    if source is not None:
        sim.clock = clock
        sim.start_time = clock()
    s = Sampler(sim, interval=interval, clock=clock, thresholds=thresholds, **kw)
    s.started_at = clock()  # scenario time 0; the first step is one ``step`` later
    return s, clock


def drive(s: Sampler, clock: FakeClock, seconds: float, step: float | None = None,
          each=None) -> None:
    """Advance the fake clock by ``seconds``, stepping the sampler every ``step`` (its interval)."""
    step = step or s.interval
    end = clock.t + seconds
    while clock.t < end - 1e-9:
        clock.t += step
        if each is not None:
            each(clock.t - s.started_at)
        s.step(clock.t)


def fired(s: Sampler, rule: str | None = None) -> list:
    """Alerts so far (of one rule if given)."""
    return [a for a in s.diagnostics.alert_list() if rule is None or a.rule == rule]


class ShapedGPUs(SimulatedGPUs):
    """Simulated GPUs whose load curves a test replaces: ``fn(gpu, t, default)`` each."""

    def __init__(self, *, mem=None, util=None, power=None, temp=None, reasons=None, host=None,
                 **kw) -> None:
        super().__init__(**kw)
        self._fns = {"mem": mem, "util": util, "power": power, "temp": temp, "reasons": reasons}
        self._host_fn = host

    def _shape(self, name: str, base, gpu: int, t):
        fn = self._fns[name]
        if fn is None:
            return base(gpu, t)
        if isinstance(t, np.ndarray):  # a buffer's samples at once: the test's curve sample by sample
            pairs = zip(t.ravel(), np.broadcast_to(base(gpu, t), t.shape).ravel(), strict=True)
            return np.array([fn(gpu, float(x), float(b)) for x, b in pairs]).reshape(t.shape)
        return fn(gpu, t, base(gpu, t))

    def mem_used_at(self, gpu: int, t: float) -> float:
        return self._shape("mem", super().mem_used_at, gpu, t)

    def util_at(self, gpu: int, t: float) -> float:
        return self._shape("util", super().util_at, gpu, t)

    def power_at(self, gpu: int, t: float) -> float:
        return self._shape("power", super().power_at, gpu, t)

    def temp_at(self, gpu: int, t: float) -> float:
        return self._shape("temp", super().temp_at, gpu, t)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):  # noqa: N802 - NVML's name
        bits = super().nvmlDeviceGetCurrentClocksEventReasons(h)
        fn = self._fns["reasons"]
        return bits if fn is None else fn(h.gpu, self._t(), bits)

    def simulated_host(self, t: float):
        base = super().simulated_host(t)
        return base if self._host_fn is None else self._host_fn(t, base)


def findings_per_evaluation(monkeypatch, rule: str) -> list[int]:
    """How many findings of ``rule`` each evaluation hands to the alerts, in order."""
    from nbgpu.diagnostics.alerts import Episodes

    counts: list[int] = []
    original = Episodes.update

    def update(self, findings, now, rules):
        counts.append(sum(1 for f in findings if f.rule == rule))
        return original(self, findings, now, rules)

    monkeypatch.setattr(Episodes, "update", update)
    return counts
