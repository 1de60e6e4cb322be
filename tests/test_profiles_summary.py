"""Summaries computed from hand-made stores: energy, memory edges, throttling, notes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from nbgpu.metrics import BY_NAME
from nbgpu.profiles.energy import integrate_power_j
from nbgpu.profiles.render import fmt_duration, one_line, summary_html
from nbgpu.profiles.summary import summarize
from nbgpu.sources.base import Device
from nbgpu.store import Store
from nbgpu.timeline import Timeline

T0 = 1_800_000_000.0


def make_timeline(power=None, energy=None, mem=None, reasons=None, util=None) -> Timeline:
    """A timeline of GPU 0 from lists of (seconds after T0, value)."""
    store = Store()
    cols = {"power_w": power, "energy_j": energy, "mem_used_bytes": mem,
            "clock_event_reasons": reasons, "util_pct": util}
    for name, rows in cols.items():
        if rows is None:
            continue
        store.declare(0, name, {name: BY_NAME[name].dtype})
        t = np.array([T0 + r[0] for r in rows], dtype=np.float64)
        store.append_many(0, name, t, {name: np.array([r[1] for r in rows], dtype=np.float64)})
    return Timeline(store, [Device(0, "test GPU", "GPU-x")])


def energy_j(tl: Timeline, t0: float, t1: float) -> tuple[float, str]:
    row = summarize(tl, t0, t1).rows[0]
    return row["energy_j"], row["energy_source"]


def test_integrated_power_of_constant_and_ramp():
    t = np.arange(0.0, 10.01, 0.02)
    assert integrate_power_j(t, np.full_like(t, 100.0), 2.0, 4.0) == pytest.approx(200.0)
    # A ramp 0 → 1000 W over 10 s: ∫ from 2 to 4 of 100·t dt = 50·(16 − 4) = 600 J.
    assert integrate_power_j(t, 100.0 * t, 2.0, 4.0) == pytest.approx(600.0, rel=1e-6)
    # Samples only inside the range: the first/last value is held to the edges.
    inner = np.array([3.0, 3.5])
    assert integrate_power_j(inner, np.array([50.0, 50.0]), 2.0, 4.0) == pytest.approx(100.0)
    assert math.isnan(integrate_power_j(t[:0], t[:0], 2.0, 4.0))


def test_energy_counter_is_moved_to_the_edges_with_power():
    power = [(k * 0.02, 100.0) for k in range(0, 301)]  # 100 W for 6 s
    energy = [(0.9, 1000.0 + 90.0), (3.2, 1000.0 + 320.0)]  # counter readings outside [1, 3]
    tl = make_timeline(power=power, energy=energy)
    joules, source = energy_j(tl, T0 + 1.0, T0 + 3.0)
    assert source == "counter"
    assert joules == pytest.approx(200.0, rel=1e-6)


def test_energy_counter_wins_over_inconsistent_power():
    # The counter says 300 J over 2 s; power readings say 100 W (200 J). The counter is used.
    tl = make_timeline(power=[(0.0, 100.0), (4.0, 100.0)], energy=[(1.0, 5000.0), (3.0, 5300.0)])
    joules, source = energy_j(tl, T0 + 1.0, T0 + 3.0)
    assert (source, joules) == ("counter", pytest.approx(300.0))


def test_energy_falls_back_to_power_then_to_none():
    tl = make_timeline(power=[(k * 0.5, 200.0) for k in range(10)])
    joules, source = energy_j(tl, T0 + 1.0, T0 + 2.0)
    assert (source, joules) == ("power", pytest.approx(200.0))
    tl = make_timeline(mem=[(0.0, 1e9)])
    joules, source = energy_j(tl, T0 + 1.0, T0 + 2.0)
    assert source == "none" and math.isnan(joules)


def test_memory_edges_peak_and_delta():
    mem = [(0.5, 1e9), (1.5, 5e9), (2.0, 9e9), (2.5, 4e9), (3.1, 3e9)]
    s = summarize(make_timeline(mem=mem), T0 + 1.0, T0 + 3.0).rows[0]
    assert s["mem_start_bytes"] == 1e9  # newest reading at or before the start
    assert s["mem_end_bytes"] == 3e9  # first reading at or after the end
    assert s["mem_peak_bytes"] == 9e9
    assert s["mem_delta_bytes"] == 2e9
    assert s["duration_s"] == pytest.approx(2.0)


def test_throttle_reasons_and_durations():
    reasons = [(0.0, 0), (1.5, 0x4), (2.0, 0x4 | 0x20), (2.5, 0x1), (3.5, 0)]
    s = summarize(make_timeline(reasons=reasons), T0 + 1.0, T0 + 3.0).rows[0]
    assert s["throttle_s"] == pytest.approx(1.0)  # 1.5 → 2.5
    assert s["throttle_reasons"] == "sw_power_cap 1.0s, sw_thermal 0.5s"
    quiet = summarize(make_timeline(reasons=[(0.0, 0x1)]), T0 + 1.0, T0 + 3.0).rows[0]
    assert quiet["throttle_reasons"] == "" and quiet["throttle_s"] == 0.0


def test_util_power_means_and_coarse_note():
    util = [(0.0 + k, 50.0 + 10 * k) for k in range(5)]  # one sample a second
    power = [(k * 2.0, 300.0) for k in range(3)]  # one sample every 2 s
    s = summarize(make_timeline(util=util, power=power), T0 + 0.5, T0 + 3.5).rows[0]
    # The line through the readings: 55 at the start edge, 85 at the end edge, time-weighted.
    assert s["util_mean_pct"] == pytest.approx(70.0)
    assert (s["util_min_pct"], s["util_max_pct"]) == (pytest.approx(55.0), pytest.approx(85.0))
    assert s["power_mean_w"] == 300.0
    assert "power: 1 sample(s)" in s["resolution_note"]
    assert math.isnan(s["sm_active_mean_pct"])  # not reported: NaN, never 0


def test_one_line_and_table_text():
    tl = make_timeline(power=[(k * 0.1, 600.0) for k in range(800)],
                       mem=[(0.0, 38.1e9), (40.0, 41.2e9), (75.0, 41.2e9)],
                       util=[(k, 87.0) for k in range(80)])
    result = summarize(tl, T0 + 1.0, T0 + 73.0)
    line = one_line(result)
    assert line == "GPU0 1m12s · util 87 % · peak 38.4 GiB (+2.9 GiB) · 600 W · 43.2 kJ"
    assert one_line(result, "failed").endswith("· FAILED")
    html = summary_html(result.rows)
    assert "<table" in html and "43.2 kJ (power)" in html and "38.4 GiB" in html
    assert ">peak</th>" in html and "all GPUs" not in html  # each cell states its unit; one GPU: no total
    assert fmt_duration(3725) == "1h02m"


def test_combined_peak_is_the_peak_of_the_aligned_sum():
    # Two cards peak at different times: the combined peak is the highest moment of the sum
    # (3 + 6 GiB), not the sum of the peaks (4 + 6) nor the largest single peak (6).
    gib = 2**30
    store = Store()
    for gpu, rows in ((0, [(0.0, 1), (1.0, 4), (2.0, 3), (3.0, 1)]),
                      (1, [(0.0, 1), (1.5, 1), (2.0, 6), (3.0, 2)])):
        store.declare(gpu, "mem", {"mem_used_bytes": np.float64})
        store.append_many(gpu, "mem", np.array([T0 + t for t, _ in rows]),
                          {"mem_used_bytes": np.array([v * gib for _, v in rows], dtype=np.float64)})
    tl = Timeline(store, [Device(0, "a"), Device(1, "b")])
    c = summarize(tl, T0 + 0.5, T0 + 2.5).combined
    assert c["gpus"] == 2
    assert c["mem_peak_bytes"] == 9 * gib
    assert (c["mem_start_bytes"], c["mem_end_bytes"]) == (2 * gib, 3 * gib)  # 1+1 and 1+2
    assert isinstance(c["mem_peak_bytes"], int)


def test_combined_power_sums_means_and_peaks_of_the_aligned_sum():
    store = Store()
    for gpu, level in ((0, 100.0), (1, 300.0)):
        store.declare(gpu, "power", {"power_w": np.float32})
        t = np.arange(0.0, 5.0, 0.1)
        store.append_many(gpu, "power", T0 + t, {"power_w": np.full(len(t), level)})
    tl = Timeline(store, [Device(0, ""), Device(1, "")])
    c = summarize(tl, T0 + 1.0, T0 + 3.0).combined
    assert c["power_mean_w"] == pytest.approx(400.0)
    assert c["power_max_w"] == pytest.approx(400.0)
    assert c["energy_j"] == pytest.approx(800.0)


def test_one_line_never_shows_a_delta_above_the_peak():
    # Four cards whose memory rises: the old one-liner read "peak 13.2 GB (+50.2)".
    store = Store()
    devices = []
    for gpu in range(4):
        store.declare(gpu, "mem", {"mem_used_bytes": np.float64})
        t = np.arange(0.0, 4.0, 0.5)
        store.append_many(gpu, "mem", T0 + t, {"mem_used_bytes": (1 + 3 * t) * 2**30})
        devices.append(Device(gpu, ""))
    result = summarize(Timeline(store, devices), T0 + 0.5, T0 + 3.0)
    c = result.combined
    assert abs(c["mem_delta_bytes"]) <= c["mem_peak_bytes"]
    assert c["mem_peak_bytes"] >= max(c["mem_start_bytes"], c["mem_end_bytes"])
    assert one_line(result).startswith("4 GPUs 2.50s · util – · peak 40.0 GiB (+30.0 GiB)")


def test_a_short_block_says_its_energy_is_below_resolution():
    tl = make_timeline(power=[(k * 0.02, 200.0) for k in range(200)])
    short = summarize(tl, T0 + 1.0, T0 + 1.3).rows[0]
    assert "energy: the block (0.30s) is shorter than 50 updates" in short["resolution_note"]
    assert "(every 20 ms, measured)" in short["resolution_note"]
    long = summarize(tl, T0 + 0.5, T0 + 3.5).rows[0]
    assert "energy" not in long["resolution_note"]


def test_a_recorded_frame_gives_the_figures_of_its_timeline():
    tl = make_timeline(power=[(k * 0.5, 100.0 + k) for k in range(20)],
                       mem=[(k * 0.5, 1e9 + 1e8 * k) for k in range(20)],
                       util=[(k * 0.5, 10.0 * (k % 5)) for k in range(20)])
    from_store = summarize(tl, T0 + 1.0, T0 + 8.0)
    from_frame = summarize(tl.to_pandas(resolution="native"), T0 + 1.0, T0 + 8.0)
    for col in ("mem_peak_bytes", "mem_delta_bytes", "util_mean_pct", "power_mean_w", "energy_j"):
        assert from_frame.rows[0][col] == pytest.approx(from_store.rows[0][col]), col


class _FakeCuda:
    """torch.cuda as the peak rule reads it: one device whose reserved peak a test sets."""

    def __init__(self, reserved: float, peak_reserved: float) -> None:
        self.reserved, self.peak_reserved = reserved, peak_reserved

    def is_initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def memory_reserved(self, i: int) -> float:
        return self.reserved

    def max_memory_reserved(self, i: int) -> float:
        return self.peak_reserved

    def get_device_properties(self, i: int):
        raise RuntimeError("no properties")  # matched by order, as with one card


def _oom_case(monkeypatch, peak_fraction: float, peak_before_start: bool = False):
    import sys
    import types

    from conftest_diagnostics import ShapedGPUs, drive, fired, sim_sampler

    total = 143771 * 2**20
    used = 0.5 * total  # NVML sees half the card the whole time
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    reserved = used - 600 * 2**20
    before = peak_fraction * total if peak_before_start else reserved
    cuda = _FakeCuda(reserved=reserved, peak_reserved=before)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    s, clock = sim_sampler(source=ShapedGPUs(count=1, mem=lambda g, t, base: used))
    t0 = clock.t
    drive(s, clock, 2.0)
    cuda.peak_reserved = peak_fraction * total  # a spike between NVML's samples (or none new)
    drive(s, clock, 2.0)
    alloc = {0: {"peak_reserved_bytes": cuda.peak_reserved, "reserved_start_bytes": cuda.reserved}}
    return fired(s, "oom_risk"), summarize(s.timeline, t0 + 1.0, clock.t, allocator=alloc).rows[0]


def test_the_oom_rule_names_the_peak_the_summary_shows(monkeypatch):
    alerts, row = _oom_case(monkeypatch, peak_fraction=0.96)
    assert row["mem_peak_source"] == "allocator"
    assert len(alerts) == 1 and alerts[0].severity == "warning"
    assert alerts[0].evidence["mem_peak_source"] == "allocator"
    assert alerts[0].evidence["mem_peak_bytes"] == pytest.approx(row["mem_peak_bytes"])
    assert row["mem_peak_bytes"] == pytest.approx(0.96 * 143771 * 2**20 + 600 * 2**20)


def test_a_high_water_mark_left_from_before_the_window_raises_nothing(monkeypatch):
    # PyTorch's max_memory_reserved() holds the highest point since its last reset, maybe an
    # hour ago (seen on the H200: an earlier 136 GiB step kept warning a later, small one)
    alerts, _ = _oom_case(monkeypatch, peak_fraction=0.96, peak_before_start=True)
    assert alerts == []


def test_an_allocator_peak_below_the_warning_level_raises_nothing(monkeypatch):
    alerts, row = _oom_case(monkeypatch, peak_fraction=0.8)
    assert row["mem_peak_source"] == "allocator"
    assert alerts == []
