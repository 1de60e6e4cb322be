"""Values shown as live that are not (issue 34, items 13-14): readings after a hang, after a
buffer's last drain, a failure on one metric, and what Prometheus cannot mean."""

from __future__ import annotations

import numpy as np

from conftest_diagnostics import ShapedGPUs, drive, sim_sampler

BUSY_S = 10.3  # the work ends just after utilisation's 10 s drain


def _busy_then_idle(gpu, t, default):
    return 98.0 if t < BUSY_S else 0.0


def _power(gpu, t, default):
    return 600.0 if t < BUSY_S else 80.0


def test_idle_ticks_after_the_last_drain_are_not_filled_with_busy_utilisation():
    """An unwatched sampler drains utilisation every 10 s: 10 s of work then 4 s idle, read at
    once. The idle ticks must not say 98 % while power says idle."""
    s, clock = sim_sampler(source=ShapedGPUs(count=1, util=_busy_then_idle, power=_power), interval=0.5,
                           diagnostics=False)
    drive(s, clock, 14.0)
    df = s.timeline.to_pandas()
    idle = df[(df["time"].astype("int64") / 1e9 > s.started_at + BUSY_S + 0.1) & (df["power_w"] < 100)]
    assert len(idle) >= 4
    util = idle["util_pct"].to_numpy()
    assert not (util > 50).any(), util  # NaN (not drained yet) or a true idle reading
    drained = s.drained_until(0, "util_pct")
    late = df["time"].astype("int64").to_numpy() / 1e9 > drained
    assert np.isnan(df["util_pct"].to_numpy()[late]).all()
    assert "util_pct" in df.attrs.get("not_drained", {})
