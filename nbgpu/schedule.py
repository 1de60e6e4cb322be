"""What the sampler reads at a time: a pure function of settings, last reads and now, so
``Sampler.step(now)`` with a fake clock runs the thread's schedule. Reads: "tick" (cheap reads,
every ``interval_s``), "energy"/"pcie"/"procs" (costly, every ``every_s[read]`` or on request),
"edge" (on request: memory and the sample buffers), "memory" (while a fast-memory lane is held).
A wake-up with no read still drains the buffers at least every ``MAX_BUFFER_DRAIN_S``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

# Sample-buffer drains, all in one place. A drain costs a fixed CPU time (H200: power 0.33 ms,
# utilisation 2.8 ms), so each buffer is drained well inside what it holds (power ~2.4 s,
# utilisation ~14 s); an "edge" read drains all at once. Utilisation comes every 10 s at its
# native 200 ms, every 5 s while someone watches (a panel on screen, a scrape, a running cell:
# for ``LIVE_HOLD_S`` after the newest ``Sampler.watch()``). Polling it instead would alias
# with periodic loads.
DRAIN_EVERY_S = {"power": 1.0, "util": 10.0, "memutil": 10.0}
WATCHED_DRAIN_EVERY_S = {"util": 5.0}
LIVE_HOLD_S = 5.0
MAX_BUFFER_DRAIN_S = DRAIN_EVERY_S["power"]  # a wake-up at least this often, read or not
TICK_SLACK_S = 1e-3  # a wake-up this close to a tick is the tick (timers wake a bit early)


def drain_every_s(stream: str, watched: bool) -> float:
    """Seconds between two drains of a sample buffer, watched or not."""
    return (WATCHED_DRAIN_EVERY_S if watched else DRAIN_EVERY_S).get(stream, DRAIN_EVERY_S[stream])


@dataclass(frozen=True)
class Settings:
    """How often each read runs, in seconds."""

    interval_s: float
    every_s: Mapping[str, float] = field(default_factory=dict)
    memory_every_s: float | None = None


@dataclass(frozen=True)
class State:
    """When each read last ran; ``next_tick`` None means the next call is the first tick."""

    next_tick: float | None = None
    last: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    """What to read now, the state after reading it, and when the next wake-up is due."""

    reads: frozenset[str]
    state: State
    wake_at: float


def plan(now: float, settings: Settings, state: State,
         urgent: frozenset[str] = frozenset()) -> Plan:
    """The reads due at ``now`` (costly ones also when ``urgent``) and the next wake-up time."""
    last = dict(state.last)
    reads = set(urgent) | {r for r, every in settings.every_s.items()
                           if now - last.get(r, -math.inf) >= every}
    next_tick = state.next_tick
    if next_tick is None or now >= next_tick - TICK_SLACK_S:
        reads.add("tick")
        # the first tick, or fell behind (a slow read): skip the missed ticks, don't burst
        behind = next_tick is None or next_tick + settings.interval_s < now
        next_tick = (now if behind else next_tick) + settings.interval_s
    fast = settings.memory_every_s
    since_memory = now - last.get("memory", -math.inf)
    if fast is not None and "tick" not in reads and since_memory >= fast - TICK_SLACK_S:
        reads.add("memory")
    if "tick" in reads:
        reads.discard("memory")  # a tick reads memory too
        last["memory"] = now
    for read in reads:
        last[read] = now
    wake_at = min(next_tick, now + MAX_BUFFER_DRAIN_S)
    if fast is not None:
        wake_at = min(wake_at, last["memory"] + fast)
    return Plan(frozenset(reads), State(next_tick, last), wake_at)
