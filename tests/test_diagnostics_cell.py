"""A cell (a capture) is judged on the cell: only findings whose condition held inside it.

The history before a block is stepped by hand on a fake clock; then the sampler's thread
runs and ``advance`` moves the clock during the block, as in tests/test_profiles_capture.py.
"""

from __future__ import annotations

import nbgpu
from conftest_diagnostics import ShapedGPUs, drive, fired, sim_sampler
from conftest_profiles import clean_profiles_fixture  # noqa: F401 - fixture

MIB = 1 << 20


def _block(s, clock, seconds: float, step: float = 0.5):
    """A capture of ``seconds`` of fake time on the running sampler ``s``."""
    s.start()
    clock.settle(s)
    cap = nbgpu.capture(sampler=s).start()
    for _ in range(round(seconds / step)):
        clock.advance(s, step)
    cap.finish()
    _ = cap.summary  # read as the cell report does, while the sampler still runs
    return cap


def test_a_leak_found_at_epoch_marks_ends_when_memory_is_freed_and_a_quiet_cell_lists_none(clean_profiles):
    def mem(g, t, m):  # +256 MiB an epoch of 4 s for 6 epochs, freed at t = 26
        return 20e9 + 256 * MIB * min(int(t / 4), 6) if t < 26 else 20e9

    s, clock = sim_sampler(source=ShapedGPUs(count=1, mem=mem), thresholds={"leak_windows_s": (600.0,)})
    for i in range(6):
        s.mark(f"epoch {i}")
        drive(s, clock, 4.0)
    s.mark("epoch 6")
    drive(s, clock, 2.0)
    assert [a.evidence["method"] for a in fired(s, "memory_leak")] == ["marks"]
    try:
        cap = _block(s, clock, 15.0)
    finally:
        s.stop()
    assert "memory_leak" not in [a.rule for a in cap.alerts]
    assert "memory_leak" not in cap.summary["alerts"].iloc[0]
    assert all(a.end is not None for a in fired(s, "memory_leak"))


def test_a_leak_found_at_marks_ends_when_the_marks_stop(clean_profiles):
    def mem(g, t, m):  # memory rises with each epoch, then stays up
        return 20e9 + 256 * MIB * min(int(t / 4), 6)

    s, clock = sim_sampler(source=ShapedGPUs(count=1, mem=mem), thresholds={"leak_windows_s": (600.0,)})
    for i in range(6):
        s.mark(f"epoch {i}")
        drive(s, clock, 4.0)
    s.mark("epoch 6")
    drive(s, clock, 2.0)
    assert fired(s, "memory_leak")
    drive(s, clock, 60.0)  # no new mark for a minute
    assert all(a.end is not None for a in fired(s, "memory_leak"))


def _oom_sampler(high_until: float):
    total = 143771 * MIB  # the simulated card's

    def mem(g, t, m):  # 93 % of the card from t = 5 until ``high_until``, then half
        return total * (0.93 if 5 <= t < high_until else 0.5)

    return sim_sampler(source=ShapedGPUs(count=1, mem=mem, mem_total_bytes=total))


def test_an_alert_whose_condition_ended_before_the_cell_is_not_the_cells(clean_profiles):
    s, clock = _oom_sampler(high_until=20.0)
    drive(s, clock, 21.0)
    assert fired(s, "oom_risk") and fired(s, "oom_risk")[0].end is None  # the episode is still on
    try:
        cap = _block(s, clock, 5.0)
    finally:
        s.stop()
    assert cap.alerts == []
    assert cap.summary["alerts"].iloc[0] == ""


def test_an_alert_carried_into_the_cell_says_it_began_before_it(clean_profiles):
    s, clock = _oom_sampler(high_until=60.0)
    drive(s, clock, 20.0)
    try:
        cap = _block(s, clock, 5.0)
    finally:
        s.stop()
    (alert,) = [a for a in cap.alerts if a.rule == "oom_risk"]
    assert alert.start < cap.start_time
    assert alert.message.endswith("(since before this cell)")
    assert "since before this cell" in cap.summary["alerts"].iloc[0]


def test_a_cell_shorter_than_a_rules_window_is_not_judged_on_readings_from_before_it(clean_profiles):
    s, clock = sim_sampler("throttle", count=1)
    drive(s, clock, 30.0)
    assert fired(s, "throttling")  # its 10 s window: throttled before the cell and during it
    try:
        cap = _block(s, clock, 3.0)
    finally:
        s.stop()
    # Judged on what it has: its own 3 s, never the 10 s window reaching back before it.
    (alert,) = [a for a in cap.alerts if a.rule == "throttling"]
    assert alert.message.endswith("(judged on the cell's 3.0 s)") and " over 3 s" in alert.message
    assert alert.evidence["judged_on_s"] == 3.0 and alert.start >= cap.start_time
    assert "since before this cell" not in alert.message


def _filling_sampler(fill_at: float):
    """Memory at half the card, then full from ``fill_at`` on (an allocation loop's OOM)."""
    total = 143771 * MIB

    def mem(g, t, m):
        return total * (0.99 if t >= fill_at else 0.5)

    return sim_sampler(source=ShapedGPUs(count=1, mem=mem, mem_total_bytes=total))


def test_a_cell_shorter_than_the_hold_that_ends_with_the_card_full_is_judged_at_its_end(clean_profiles):
    # The OOM cell: under a second, memory full at its end; no evaluation falls inside it.
    s, clock = _filling_sampler(fill_at=10.3)
    drive(s, clock, 10.0)
    try:
        cap = _block(s, clock, 0.6, step=0.3)
    finally:
        s.stop()
    (alert,) = [a for a in cap.alerts if a.rule == "oom_risk"]
    assert alert.severity == "warning" and "99 %" in alert.message
    assert "since before this cell" not in alert.message


def test_a_short_cell_with_memory_below_the_level_at_its_end_gets_no_oom_risk(clean_profiles):
    s, clock = _filling_sampler(fill_at=1e9)
    drive(s, clock, 10.0)
    try:
        cap = _block(s, clock, 0.6, step=0.3)
    finally:
        s.stop()
    assert cap.alerts == []


def test_a_cells_alert_shows_the_figures_of_a_window_inside_the_cell_where_there_is_one():
    # A window reaching 2 s before the cell (the tolerance at its edge) saw the cell before's
    # thermal throttling; the cell's own windows see the power cap: its figures are shown.
    from nbgpu.diagnostics.alerts import Alert, judged_in

    t0 = 1000.0
    edge = (t0 + 8.5, t0 - 1.5, "warning", "throttling (thermal)", {"temp_c": 88.0})
    inside = (t0 + 12.5, t0 + 2.5, "info", "throttling (power)", {"power_w": 699.0})
    a = Alert("throttling", "warning", 0, t0 + 8.5, None, edge[3], "", dict(edge[4]), [edge, inside])
    (got,) = judged_in([a], t0, t0 + 15.0, tolerance_s=2.0)
    assert got.message == "throttling (power)" and got.severity == "info"
    (short,) = judged_in([a], t0, t0 + 9.0, tolerance_s=2.0)  # only the edge window counts
    assert short.message == "throttling (thermal)"
