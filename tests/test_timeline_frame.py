"""The default DataFrame: one row per (tick, GPU), every metric filled; native rows one argument away."""

from __future__ import annotations

import numpy as np
import pytest

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.errors import BadArgumentError

T0 = 1_800_000_000.0


def steady_run(make_clock, gpus: int = 2, seconds: float = 6.0, interval: float = 0.1) -> Sampler:
    """A sampler over simulated GPUs stepped by hand on a fake clock (no thread)."""
    clock = make_clock()
    s = Sampler(SimulatedGPUs(count=gpus, seed=3, clock=clock), interval=interval, clock=clock,
                diagnostics=False)
    for k in range(int(seconds / 0.01) + 1):
        clock.t = T0 + k * 0.01
        s.step(clock.t)
    s.request("edge")  # what the buffers still hold, drained as a stopping thread's last step does
    s.step(clock.t)
    return s


@pytest.fixture(scope="module", name="run")
def run_fixture(make_clock):
    s = steady_run(make_clock)
    yield s
    s.stop()


def test_default_frame_is_one_row_per_tick_and_gpu_with_every_metric_filled(run):
    df = run.timeline.between(T0 + 1.0, T0 + 5.0).to_pandas()
    ticks = run.timeline.between(T0 + 1.0, T0 + 5.0).host()
    assert len(df) == 2 * len(ticks)  # one row per (tick, GPU)
    assert not df.duplicated(["time", "gpu"]).any()
    for col in ("util_pct", "power_w", "mem_used_bytes", "temp_c", "energy_j"):
        assert df[col].notna().all(), col  # df.plot(x="time", y=col) draws a line, no gaps
    assert (df["power_max_w"] >= df["power_w"] - 1e-6).all()
    assert df["mem_used_bytes"].dtype == np.int64  # a byte count is an integer


def test_native_resolution_keeps_every_reading_at_its_time(run):
    part = run.timeline.between(T0 + 1.0, T0 + 5.0)
    native = part.to_pandas(resolution="native")
    ticked = part.to_pandas()
    t, _ = part.series(0, "power_w")
    assert len(native[native["gpu"] == 0]) >= len(t) > len(ticked[ticked["gpu"] == 0])
    assert native["util_pct"].isna().any()  # sparse: rows carry what was read at that instant
    # Folding keeps the mean: the power figure over the range is the same either way.
    assert ticked[ticked["gpu"] == 0]["power_w"].mean() == pytest.approx(
        native[native["gpu"] == 0]["power_w"].mean(), rel=0.05)


def test_default_frame_draws_lines(run):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    df = run.timeline.between(T0 + 1.0, T0 + 5.0).to_pandas()
    ax = df[df["gpu"] == 0].plot(x="time", y="util_pct")
    xs, ys = ax.get_lines()[0].get_data()
    assert len(xs) == (df["gpu"] == 0).sum() and not np.isnan(np.asarray(ys, dtype=float)).any()


def test_unknown_resolution_is_refused(run):
    with pytest.raises(BadArgumentError, match="tick, native"):
        run.timeline.to_pandas(resolution="fine")
