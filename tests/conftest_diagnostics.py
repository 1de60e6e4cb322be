"""Helpers for the diagnostics tests: a fake clock and a sampler driven tick by tick."""

from __future__ import annotations

import math

from nbgpu import Sampler
from nbgpu.sources.simulated import SimulatedGPUs

T0 = 1_800_000_000.0


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def sim_sampler(scenario: str = "steady", count: int = 2, thresholds=None, source=None,
                interval: float = 0.5, **kw) -> tuple[Sampler, FakeClock]:
    """A Sampler on simulated GPUs and a fake clock, not started (drive it with ``drive``)."""
    clock = FakeClock()
    sim = source if source is not None else SimulatedGPUs(count=count, scenario=scenario, clock=clock)
    if source is not None:
        sim.clock = clock
        sim.start_time = clock()
    s = Sampler(sim, interval=interval, clock=clock, thresholds=thresholds, **kw)
    s.started_at = clock()
    s._drive_last = {k: -math.inf for k in s._every}
    return s, clock


def drive(s: Sampler, clock: FakeClock, seconds: float, step: float | None = None,
          each=None) -> None:
    """Advance the fake clock by ``seconds``, running one full sampler tick per ``step``."""
    step = step or s.interval
    end = clock.t + seconds
    while clock.t < end - 1e-9:
        clock.t += step
        due = frozenset(k for k, every in s._every.items() if clock.t - s._drive_last[k] >= every)
        for k in due:
            s._drive_last[k] = clock.t
        if each is not None:
            each(clock.t - s.started_at)
        s._tick(clock.t, due, True)


def fired(s: Sampler, rule: str | None = None) -> list:
    """Alerts so far (of one rule if given)."""
    return [a for a in s.diagnostics.alert_list() if rule is None or a.rule == rule]
