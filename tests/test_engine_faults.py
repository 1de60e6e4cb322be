"""Injected NVML faults: not supported, GPU lost, driver missing, empty sample buffers."""

from __future__ import annotations

import pytest

import nbgpu
from nbgpu.sources.simulated import SimulatedGPUs


def sim_and_clock(stepped, **kw) -> tuple[SimulatedGPUs, object]:
    clock = stepped.new_clock()
    return SimulatedGPUs(clock=clock, **kw), clock


def advance(s: nbgpu.Sampler, clock, seconds: float, dt: float = 0.05) -> None:
    """Step the sampler through ``seconds`` of fake time, as its thread would."""
    for _ in range(round(seconds / dt)):
        clock.t += dt
        s.step(clock.t)


@pytest.mark.parametrize("init_error, words", [
    ("driver_not_loaded", "Driver Not Loaded"),
    ("library_not_found", "Library Not Found"),
    ("no_permission", "Insufficient Permissions"),
])
def test_nvml_unavailable_names_the_error_and_what_to_try(init_error, words):
    with pytest.raises(nbgpu.NVMLUnavailableError) as info:
        nbgpu.Sampler(source=SimulatedGPUs(init_error=init_error))
    message = str(info.value)
    assert words in message
    assert "nvidia-smi" in message or "--gpus all" in message
    assert "source='sim'" in message
    assert "\n" not in message


def test_no_gpu_is_a_clear_error_and_releases_nvml():
    sim = SimulatedGPUs(count=0)
    with pytest.raises(nbgpu.NVMLUnavailableError, match="no GPU"):
        nbgpu.Sampler(source=sim)
    assert not sim.initialised


def test_missing_pynvml_module_is_reported(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(nbgpu.NVMLUnavailableError, match="nvidia-ml-py"):
        nbgpu.Sampler(source="nvml")


def test_unsupported_metric_is_absent_never_zero(stepped):
    sim, clock = sim_and_clock(stepped, unsupported=["nvmlDeviceGetTemperature",
                                            "nvmlGpmQueryDeviceSupport"])
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    advance(s, clock, 0.4)
    s.stop()
    assert "temp_c" not in s.devices[0].metrics
    assert "sm_active_pct" not in s.devices[0].metrics
    df = s.timeline.to_pandas()
    assert "temp_c" not in df.columns
    assert "sm_active_pct" not in df.columns
    assert s.errors == 0


def test_metric_that_stops_being_supported_mid_run_becomes_nan(stepped):
    sim, clock = sim_and_clock(stepped)
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    advance(s, clock, 0.4)
    sim.set_unsupported("nvmlDeviceGetTemperature", gpu=0)
    cut = clock.t
    advance(s, clock, 0.4)
    s.stop()
    t, v = s.timeline.series(0, "temp_c")
    assert len(t) and (t <= cut).all()
    assert (v > 0).all()
    assert len(s.timeline.between(cut + 0.15).series(1, "temp_c")[0]) >= 2
    assert "temp_c" not in s.source.devices()[0].metrics


def test_gpu_lost_mid_run_stops_its_series_and_the_rest_carry_on(stepped):
    sim, clock = sim_and_clock(stepped, count=2)
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    advance(s, clock, 0.4)
    sim.lose_gpu(1)
    lost_at = clock.t
    advance(s, clock, 0.6)
    s.stop()
    assert 1 in s.lost
    assert sim.gpm_samples_live == 0
    t1, _ = s.timeline.series(1, "mem_used_bytes")
    assert (t1 <= lost_at).all()
    t0, _ = s.timeline.series(0, "mem_used_bytes")
    assert (t0 > lost_at + 0.3).any()
    assert any(e.kind == "lost" and e.device == 1 for e in s.timeline.events())


def test_sample_buffer_not_found_means_nothing_new_not_an_error(stepped):
    sim, clock = sim_and_clock(stepped)
    sim.inject_error("nvmlDeviceGetSamples", 6)  # NVML_ERROR_NOT_FOUND on every drain
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    advance(s, clock, 0.5)
    s.stop()
    assert s.errors == 0
    assert s.last_error is None
    assert len(s.timeline.series(0, "mem_used_bytes")[0]) >= 3


def test_an_empty_buffer_for_long_falls_back_to_polling(monkeypatch, stepped):
    import nbgpu.schedule as schedule
    import nbgpu.sources.nvml as nvml_mod

    monkeypatch.setattr(nvml_mod, "BUFFER_DEAD_AFTER_S", 0.3)
    monkeypatch.setattr(schedule, "DRAIN_EVERY_S", dict.fromkeys(schedule.DRAIN_EVERY_S, 0.1))
    sim, clock = sim_and_clock(stepped)
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    advance(s, clock, 0.1)
    sim.inject_error("nvmlDeviceGetSamples", 6)
    advance(s, clock, 1.2)
    s.stop()
    t, v = s.timeline.series(0, "power_w")
    late = t > t[0] + 0.9
    assert late.any() and (v[late] > 0).all()


def test_transient_nvml_error_leaves_nan_is_counted_and_the_thread_lives(stepped):
    sim, clock = sim_and_clock(stepped)
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    advance(s, clock, 0.2)
    sim.inject_error("nvmlDeviceGetMemoryInfo", 999, gpu=0, times=2)
    advance(s, clock, 0.5)
    status = s.status()
    s.stop()
    assert status.errors_by_gpu.get(0) == 2 and 1 not in status.errors_by_gpu
    assert "Unknown Error" in (status.last_error_by_gpu.get(0) or "")
    assert len(s.timeline.series(0, "mem_used_bytes")[0]) >= 3


def test_nvml_init_and_shutdown_are_paired_with_other_users(stepped):
    sim, clock = sim_and_clock(stepped)
    sim.nvmlInit()  # someone else (torch, the user) holds NVML
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    advance(s, clock, 0.2)
    s.stop()
    assert sim.initialised  # nbgpu released only its own reference
    sim.nvmlShutdown()
    assert not sim.initialised


def test_mig_slices_are_their_own_devices_with_what_they_support(stepped):
    sim, clock = sim_and_clock(stepped, count=1, mig={0: 2})
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    advance(s, clock, 0.4)
    s.stop()
    keys = [d.key for d in s.devices]
    assert keys == [0, "0/0", "0/1"]
    mig = s.devices[1]
    assert mig.mig and mig.parent == 0 and mig.card == 0
    assert "mem_used_bytes" in mig.metrics
    assert "util_pct" not in mig.metrics
    assert mig.mem_total_bytes < s.devices[0].mem_total_bytes
    df = s.timeline.to_pandas()
    assert {"0/0", "0/1"} <= set(df["gpu"])
    assert "util_pct" not in df.columns  # MIG: utilisation is not supported anywhere
    assert df[df["gpu"] == "0/1"]["mem_used_bytes"].notna().any()
