"""A recorded run gives the figures of the timeline it came from: tick frames, .jsonl, .csv, .parquet."""

from __future__ import annotations

import pytest

from nbgpu.profiles.summary import summarize
from nbgpu.runfile import load_run
from nbgpu.sampler import Sampler
from nbgpu.sources.simulated import SimulatedGPUs

T0 = 1_800_000_000.0
# Tolerance per figure: a tick frame folds buffered samples (power every 20 ms, utilisation
# every 200 ms) into their tick, which moves means by a little; energy and memory must agree.
FIGURES = {"energy_j": 1e-3, "mem_peak_bytes": 1e-9, "duration_s": 1e-9,
           "power_mean_w": 1e-2, "util_mean_pct": 1e-2}


def sampled(stepped, seconds: float = 10.0, energy_every_s: float = 5.0) -> Sampler:
    """A stopped sampler of 2 simulated GPUs stepped every 0.1 s for ``seconds``."""
    clock = stepped.new_clock()
    s = Sampler(SimulatedGPUs(count=2, seed=4, clock=clock), interval=0.1, host=False,
                energy_every_s=energy_every_s, clock=clock, diagnostics=False)
    for k in range(round(seconds / 0.1) + 1):
        clock.t = T0 + k * 0.1
        s.step(clock.t)
    return s


def test_a_tick_frame_gives_the_energy_of_its_timeline(stepped):
    s = sampled(stepped)
    a, b = T0 + 0.5, T0 + 9.5
    ref = summarize(s.timeline, a, b)
    got = summarize(s.timeline.to_pandas(), a, b)
    for want, row in zip(ref.rows, got.rows, strict=True):
        assert want["energy_source"] == row["energy_source"] == "counter"
        assert want["energy_j"] > 0
        assert row["energy_j"] == pytest.approx(want["energy_j"], rel=1e-3)
        # the counter agrees with power × time, so energy is mean power times duration
        assert row["energy_j"] == pytest.approx(row["power_mean_w"] * row["duration_s"], rel=0.02)


def test_a_counter_that_never_moves_in_the_block_gives_energy_from_power(stepped):
    s = sampled(stepped, seconds=4.0, energy_every_s=60.0)  # one counter reading, at the start
    frame = s.timeline.to_pandas()
    row = summarize(frame, T0 + 1.0, T0 + 3.0).rows[0]
    assert row["energy_source"] == "power"
    assert row["energy_j"] == pytest.approx(row["power_mean_w"] * 2.0, rel=1e-6)


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_a_recorded_file_gives_the_figures_of_its_timeline(tmp_path, ext, stepped):
    s = sampled(stepped)
    path = getattr(s.timeline, f"to_{ext}")(str(tmp_path / f"run.{ext}"))
    run = load_run(path)
    a, b = T0 + 0.5, T0 + 9.5
    ref = summarize(s.timeline, a, b)
    got = summarize(run.frame, a, b, devices=run.devices())  # times are tz-aware UTC here
    assert [r["gpu"] for r in got.rows] == [r["gpu"] for r in ref.rows]
    for want, row in zip([*ref.rows, ref.combined], [*got.rows, got.combined], strict=True):
        assert row["energy_source"] == want["energy_source"]
        for col, rel in FIGURES.items():
            assert row[col] == pytest.approx(want[col], rel=rel), (ext, row["gpu"], col)
    whole = summarize(run.frame)
    assert whole.combined["duration_s"] == pytest.approx(10.0, abs=0.01)
    assert whole.combined["energy_j"] > 0


def test_a_copied_counter_value_keeps_the_time_it_was_read(stepped):
    # Counter read at 0 s and 8 s; the frame repeats the 0 s value on every tick until 8 s.
    s = sampled(stepped, seconds=9.0, energy_every_s=8.0)
    frame = s.timeline.to_pandas()
    a, b = T0 + 6.0, T0 + 8.5  # the block starts more than the edge slack after the 0 s reading
    want = summarize(s.timeline, a, b).rows[0]
    row = summarize(frame, a, b).rows[0]
    # one real counter reading near the block: energy from power, as the timeline says
    assert row["energy_source"] == want["energy_source"] == "power"
    assert row["energy_j"] == pytest.approx(want["energy_j"], rel=FIGURES["power_mean_w"])
