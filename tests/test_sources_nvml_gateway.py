"""The NVML gateway and read table, driven directly on simulated GPUs with a fake clock."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import nbgpu
from nbgpu.metrics import BY_NAME
from nbgpu.sources.base import Device, ProcessInfo, ReadError
from nbgpu.sources.nvml import NVMLSource
from nbgpu.sources.nvml_gateway import (
    FatalError,
    NothingNewError,
    NotSupportedError,
    NVMLGateway,
    TransientError,
)
from nbgpu.sources.nvml_reads import READS
from nbgpu.sources.simulated import SimulatedGPUs

TICK = frozenset({"tick"})


def opened(clock, **kw) -> tuple[SimulatedGPUs, NVMLSource]:
    sim = SimulatedGPUs(clock=clock, **kw)
    src = NVMLSource(sim)
    src.open()
    return sim, src


def tick_row(reading, key) -> dict[str, float]:
    """The one-row "tick" batch of ``key`` in a reading, as {metric: value}."""
    rows = [b for b in reading.batches if b.device == key and b.stream == "tick"]
    assert len(rows) <= 1
    assert all(b.one_row for b in rows)
    return {m: float(v) for m, v in rows[0].values.items()} if rows else {}


@pytest.mark.parametrize("code, kind", [
    (3, NotSupportedError), (4, NotSupportedError), (13, NotSupportedError),
    (6, NothingNewError), (15, FatalError), (9, FatalError), (999, TransientError),
])
def test_gateway_sorts_every_nvml_failure_into_one_kind_raised_from_it(clock, code, kind):
    sim, src = opened(clock)
    sim.inject_error("nvmlDeviceGetTemperature", code)
    gw = NVMLGateway(sim)
    with pytest.raises(kind) as info:
        gw.call("nvmlDeviceGetTemperature", sim.nvmlDeviceGetHandleByIndex(0), 0)
    assert info.value.code == code
    assert getattr(info.value.__cause__, "value", None) == code
    src.close()


def test_a_function_missing_from_the_binding_is_a_missing_capability(clock):
    sim, src = opened(clock)
    with pytest.raises(NotSupportedError, match="not in this NVML binding"):
        NVMLGateway(sim).call("nvmlDeviceGetSomethingFromTheFuture")
    src.close()


def test_nvml_unavailable_carries_code_and_hint_as_fields():
    sim = SimulatedGPUs(init_error="driver_not_loaded")
    with pytest.raises(nbgpu.NVMLUnavailableError) as info:
        NVMLSource(sim).open()
    exc = info.value
    assert exc.code == 9
    assert "nvidia-smi" in exc.hint
    assert exc.hint in str(exc) and "\n" not in str(exc)
    assert getattr(exc.__cause__, "value", None) == 9


def test_the_read_table_names_only_known_metrics_once_per_tier():
    rows = [(r.name, r.tier) for r in READS]
    assert len(rows) == len(set(rows))
    for r in READS:
        assert set(r.metrics) <= set(BY_NAME), r.name
        assert (r.reader is None) == (r.buffer is not None)


def test_devices_are_typed_and_still_read_as_the_old_dicts(clock):
    _sim, src = opened(clock, count=1, mig={0: 2})
    card, mig = src.devices()[0], src.devices()[1]
    assert isinstance(card, Device)
    assert (card.key, card.parent, card.mig) == (0, None, False)
    assert (mig.key, mig.parent, mig.card, mig.mig) == ("0/0", 0, 0, True)
    assert isinstance(card.mem_total_bytes, int)
    assert "temp_c" in card.metrics and "temp_c" not in mig.metrics
    src.close()


def test_a_transient_error_while_probing_does_not_hide_the_metric(clock):
    sim = SimulatedGPUs(clock=clock)
    sim.inject_error("nvmlDeviceGetTemperature", 999, gpu=0, times=1)
    sim.inject_error("nvmlGpmSampleGet", 999, gpu=0, times=1)
    src = NVMLSource(sim)
    src.open()
    assert "temp_c" in src.devices()[0].metrics
    assert "sm_active_pct" in src.devices()[0].metrics
    values = {}
    for _ in range(3):
        clock.t += 0.5
        values.update(tick_row(src.read(clock.t, TICK), 0))
    assert values["temp_c"] > 0
    assert 0 < values["sm_active_pct"] <= 100
    src.close()


def test_a_metric_unsupported_mid_run_is_reported_and_not_read_again(clock):
    sim, src = opened(clock)
    clock.t += 0.5
    assert "temp_c" in tick_row(src.read(clock.t, TICK), 0)
    sim.set_unsupported("nvmlDeviceGetTemperature", gpu=0)
    clock.t += 0.5
    reading = src.read(clock.t, TICK)
    events = [e for e in reading.events if e.kind == "unsupported"]
    assert [(e.device, e.metrics) for e in events] == [(0, ("temp_c",))]
    assert reading.errors == []
    assert "temp_c" not in src.devices()[0].metrics
    assert "temp_c" in tick_row(reading, 1)
    calls = sim.calls["nvmlDeviceGetTemperature"]
    clock.t += 0.5
    assert "temp_c" not in tick_row(src.read(clock.t, TICK), 0)
    assert sim.calls["nvmlDeviceGetTemperature"] == calls + 1  # only GPU 1 asked
    src.close()


def test_transient_errors_are_counted_per_device_and_logged_once(clock, caplog):
    sim, src = opened(clock)
    sim.inject_error("nvmlDeviceGetMemoryInfo", 999, gpu=0)
    errors = []
    with caplog.at_level(logging.WARNING, logger="nbgpu"):
        for _ in range(3):
            clock.t += 0.5
            reading = src.read(clock.t, TICK)
            errors += reading.errors
            assert "mem_used_bytes" not in tick_row(reading, 0)
            assert tick_row(reading, 1)["mem_used_bytes"] > 0
    assert len(errors) == 3
    assert {(e.device, e.read) for e in errors} == {(0, "memory")}
    assert all(isinstance(e, ReadError) and "Unknown Error" in e.message for e in errors)
    assert sum("Unknown Error" in r.getMessage() for r in caplog.records) == 1
    assert "mem_used_bytes" in src.devices()[0].metrics  # failing, not unsupported
    src.close()


def test_a_lost_gpu_is_an_event_its_gpm_samples_are_freed_and_it_is_not_read_again(clock):
    sim, src = opened(clock)
    clock.t += 0.5
    src.read(clock.t, TICK)
    assert sim.gpm_samples_live == 4
    sim.lose_gpu(1)
    clock.t += 0.5
    reading = src.read(clock.t, TICK)
    assert [(e.device, e.kind) for e in reading.events] == [(1, "lost")]
    assert sim.gpm_samples_live == 2
    clock.t += 0.5
    reading = src.read(clock.t, TICK)
    assert {b.device for b in reading.batches} == {0}
    assert reading.events == [] and reading.errors == []
    src.close()
    assert sim.gpm_samples_live == 0


@pytest.mark.parametrize("mig", [None, {0: 2}])
def test_every_gpm_sample_is_freed_on_close(clock, mig):
    sim, src = opened(clock, count=2, mig=mig)
    for _ in range(4):
        clock.t += 0.5
        src.read(clock.t, TICK)
    assert sim.gpm_samples_live > 0
    src.close()
    assert sim.gpm_samples_live == 0
    assert not sim.initialised


def test_gpm_unsupported_mid_run_frees_its_samples(clock):
    sim, src = opened(clock, count=1)
    clock.t += 0.5
    src.read(clock.t, TICK)
    sim.set_unsupported("nvmlGpmSampleGet", gpu=0)
    clock.t += 0.5
    reading = src.read(clock.t, TICK)
    assert any(e.kind == "unsupported" and "sm_active_pct" in e.metrics for e in reading.events)
    assert sim.gpm_samples_live == 0
    src.close()


def test_the_memory_tier_reads_only_memory_used_of_the_selected_gpus(clock):
    sim, src = opened(clock, count=3)
    src.select({0, 2})
    assert src.streams()[0]["memory"] == {"mem_used_bytes": np.float64}
    clock.t += 0.5
    src.read(clock.t, TICK)  # buffers drained: they are not due again for a while
    before = dict(sim.calls)
    clock.t += 0.01
    reading = src.read(clock.t, frozenset({"memory"}))
    assert {(b.device, b.stream) for b in reading.batches} == {(0, "memory"), (2, "memory")}
    assert all(set(b.values) == {"mem_used_bytes"} for b in reading.batches)
    asked = {f: n - before.get(f, 0) for f, n in sim.calls.items() if n != before.get(f, 0)}
    assert asked == {"nvmlDeviceGetMemoryInfo": 2}
    src.close()


def test_a_60_ms_memory_spike_is_caught_by_the_memory_tier_at_10_ms(clock):
    sim, src = opened(clock, count=1)
    base = sim.nvmlDeviceGetMemoryInfo(sim.nvmlDeviceGetHandleByIndex(0)).used
    sim.add_memory_spike(0, at=clock.t + 0.203, seconds=0.06, extra_bytes=16 * 2**30)
    peak = 0.0
    for _ in range(50):
        clock.t += 0.01
        for b in src.read(clock.t, frozenset({"memory"})).batches:
            if b.stream == "memory":
                peak = max(peak, b.values["mem_used_bytes"])
    assert peak >= base + 15 * 2**30
    src.close()


def test_process_snapshots_are_replaced_whole_never_changed_under_a_reader(clock):
    sim, src = opened(clock, count=1)
    procs = frozenset({"procs"})
    clock.t += 10
    src.read(clock.t, procs)
    first = src.processes
    held = [list(v) for v in first.values()]
    sim.add_process(0, 4242, 2**30, name="trainer", user="someone-else")
    clock.t += 1
    src.read(clock.t, procs)
    assert src.processes is not first
    assert [list(v) for v in first.values()] == held
    listed = {p.pid: p for p in src.processes[0]}
    assert listed[4242] == ProcessInfo(4242, 2**30, "trainer", "someone-else")
    src.close()
