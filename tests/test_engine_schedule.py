"""The pure scheduler: what is due at a time, given the settings and the last reads."""

from __future__ import annotations

import itertools
import math

import pytest

from nbgpu.schedule import MAX_BUFFER_DRAIN_S, Settings, State, plan

EVERY = {"energy": 5.0, "pcie": 5.0, "procs": 2.0}


def walk(settings: Settings, seconds: float, t0: float = 1000.0, urgent_at=()) -> list:
    """(time, reads) at every wake-up the plan asks for, as the thread would wake."""
    state, now, out = State(), t0, []
    urgent_at = list(urgent_at)
    while now <= t0 + seconds + 1e-9:
        urgent = frozenset(r for t, r in urgent_at if t0 + t <= now)
        urgent_at = [(t, r) for t, r in urgent_at if t0 + t > now]
        p = plan(now, settings, state, urgent)
        out.append((now - t0, p.reads))
        state, now = p.state, p.wake_at
    return out


def test_the_first_call_is_a_tick_with_every_costly_read():
    p = plan(0.0, Settings(0.5, EVERY), State())
    assert p.reads == {"tick", "energy", "pcie", "procs"}
    assert p.wake_at == 0.5


def test_ticks_every_interval_and_costly_reads_on_their_own_periods():
    steps = walk(Settings(0.5, EVERY), 10.0)
    ticks = [t for t, r in steps if "tick" in r]
    assert ticks == pytest.approx([0.5 * i for i in range(21)])
    assert [t for t, r in steps if "energy" in r] == pytest.approx([0, 5, 10])
    assert [t for t, r in steps if "procs" in r] == pytest.approx([0, 2, 4, 6, 8, 10])


def test_a_slow_interval_still_wakes_to_drain_buffers_without_cheap_reads():
    steps = walk(Settings(3.0, EVERY), 6.0)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(steps)]
    assert max(gaps) <= MAX_BUFFER_DRAIN_S + 1e-9
    assert [t for t, r in steps if "tick" in r] == pytest.approx([0, 3, 6])
    assert any(not r for _, r in steps)  # drain-only wake-ups read nothing cheap


def test_an_urgent_read_is_done_at_the_next_call_and_resets_its_period():
    steps = walk(Settings(0.5, EVERY), 8.0, urgent_at=[(1.2, "energy")])
    assert [t for t, r in steps if "energy" in r] == pytest.approx([0, 1.5, 6.5])


def test_a_late_wake_up_skips_missed_ticks_instead_of_bursting():
    s = Settings(0.5, EVERY)
    p = plan(0.0, s, State())
    late = plan(3.2, s, p.state)
    assert "tick" in late.reads and late.wake_at == pytest.approx(3.7)
    assert "tick" not in plan(3.3, s, late.state).reads


def test_the_fast_memory_lane_reads_memory_between_ticks_only_while_set():
    steps = walk(Settings(0.5, EVERY, memory_every_s=0.01), 1.0)
    memory = [t for t, r in steps if "memory" in r]
    assert len(memory) == pytest.approx(98, abs=2)  # 100 slots minus the ticks
    assert not any("memory" in r and "tick" in r for _, r in steps)
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(steps)]
    assert max(gaps) == pytest.approx(0.01)
    assert not any("memory" in r for _, r in walk(Settings(0.5, EVERY), 1.0))


def test_the_plan_is_pure():
    s, state = Settings(0.5, EVERY), State(next_tick=10.0, last={"energy": 7.0})
    a, b = plan(9.0, s, state), plan(9.0, s, state)
    assert a == b and state == State(next_tick=10.0, last={"energy": 7.0})
    assert math.isinf(plan(9.0, s, state).wake_at) is False
