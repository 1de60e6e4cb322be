"""NVML at start-up: PCIe probed at its first read, a list-only open, one NVML open handed on."""

from __future__ import annotations

import logging
import sys

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell

import nbgpu
from conftest_panel import row_titles
from nbgpu import session
from nbgpu.sources.nvml import NVMLSource
from nbgpu.sources.simulated import SimulatedGPUs
from nbgpu.widgets import registry

PCIE = ("pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s")


def test_open_does_not_wait_on_pcie_but_keeps_it_as_a_metric() -> None:
    sim = SimulatedGPUs(count=2)
    src = NVMLSource(sim)
    src.open()
    try:
        assert sim.calls.get("nvmlDeviceGetPcieThroughput", 0) == 0
        assert all(set(PCIE) <= set(d.metrics) for d in src.devices())
    finally:
        src.close()


def test_pcie_found_unsupported_at_its_first_read_disappears_quietly(caplog, stepped) -> None:
    clock = stepped.new_clock()
    sim = SimulatedGPUs(count=1, clock=clock, unsupported=["nvmlDeviceGetPcieThroughput"])
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    with caplog.at_level(logging.DEBUG, logger="nbgpu"):
        for _ in range(5):
            clock.t += 0.1
            s.step(clock.t)
    s.stop()
    assert sim.calls["nvmlDeviceGetPcieThroughput"] >= 1  # the first read decided
    assert not set(PCIE) & set(s.source.devices()[0].metrics)
    states = s.latest()[0]["states"]
    assert {states[m] for m in PCIE if m in states} <= {"unsupported"}
    assert s.errors == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    events = [e for e in s.timeline.events() if e.kind == "unsupported"]
    assert len(events) == 1 and "not supported" in events[0].label
    df = s.timeline.to_pandas()
    for m in PCIE:
        assert m not in df.columns or df[m].isna().all()


def test_pcie_supported_reads_values_at_the_first_pcie_tick(stepped) -> None:
    clock = stepped.new_clock()
    sim = SimulatedGPUs(count=1, clock=clock)
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    clock.t += 0.1
    s.step(clock.t)
    s.stop()
    t, v = s.timeline.series(0, "pcie_rx_bytes_per_s")
    assert len(t) == 1 and np.isfinite(v).all()
    assert not [e for e in s.timeline.events() if e.kind == "unsupported"]


def test_pcie_that_stops_later_is_still_no_longer_supported(stepped) -> None:
    clock = stepped.new_clock()
    sim = SimulatedGPUs(count=1, clock=clock)
    s = nbgpu.Sampler(source=sim, interval=0.1, clock=clock)
    clock.t += 0.1
    s.step(clock.t)
    sim.set_unsupported("nvmlDeviceGetPcieThroughput")
    for _ in range(200):  # PCIe is read every 15 s
        clock.t += 0.1
        s.step(clock.t)
    s.stop()
    events = [e for e in s.timeline.events() if e.kind == "unsupported"]
    assert len(events) == 1 and "no longer supported" in events[0].label


def test_listing_names_the_gpus_without_probing_and_open_then_probes_once() -> None:
    sim = SimulatedGPUs(count=2)
    src = NVMLSource(sim)
    src.open_listing()
    assert src.describe() == "2 simulated GPUs: 2× NVIDIA H200 (simulated) (driver 580.00 (simulated))"
    assert [d.key for d in src.devices()] == [0, 1]
    assert sim.calls.get("nvmlDeviceGetMemoryInfo", 0) == 0
    assert sim.calls.get("nvmlDeviceGetSamples", 0) == 0
    src.open()
    assert sim.calls["nvmlInit"] == 1
    full = NVMLSource(SimulatedGPUs(count=2))
    full.open()
    assert src.devices() == full.devices()
    full.close()
    src.close()
    assert not sim.initialised


def test_listing_then_open_keeps_mig_slices_in_order() -> None:
    sim = SimulatedGPUs(count=2, mig={0: 2})
    src, full = NVMLSource(sim), NVMLSource(SimulatedGPUs(count=2, mig={0: 2}))
    src.open_listing()
    assert [d.key for d in src.devices()] == [0, 1]
    src.open()
    full.open()
    assert [d.key for d in src.devices()] == [d.key for d in full.devices()] == [0, "0/0", "0/1", 1]
    assert src.devices() == full.devices()
    src.close()
    full.close()
    assert not sim.initialised


def test_a_failed_listing_releases_nvml() -> None:
    sim = SimulatedGPUs(count=0)
    with pytest.raises(nbgpu.NVMLUnavailableError, match="no GPU"):
        NVMLSource(sim).open_listing()
    assert not sim.initialised


@pytest.fixture
def fake_nvml(monkeypatch):
    """Simulated GPUs standing in for the pynvml module, so "auto" takes them as real."""
    sim = SimulatedGPUs(count=1)
    monkeypatch.setitem(sys.modules, "pynvml", sim)
    session.reset()
    yield sim
    sh = InteractiveShell.instance()
    if "gpumon" in sh.magics_manager.magics["line"]:
        sh.run_line_magic("unload_ext", "nbgpu")
    registry.close_all()
    session.reset()


def test_load_ext_and_gpumon_initialise_nvml_once(fake_nvml, capsys) -> None:
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "nbgpu")
    assert "1 GPU: NVIDIA H200 (simulated)" in capsys.readouterr().out
    sh.run_line_magic("gpumon", "")
    assert fake_nvml.calls["nvmlInit"] == 1
    shared = session.shared_sampler()
    assert shared.running and set(PCIE) <= set(shared.devices[0].metrics)
    sh.run_line_magic("unload_ext", "nbgpu")
    assert not fake_nvml.initialised


def test_unload_without_gpumon_releases_the_listed_nvml(fake_nvml, capsys) -> None:
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "nbgpu")
    assert fake_nvml.initialised
    sh.run_line_magic("unload_ext", "nbgpu")
    assert not fake_nvml.initialised


def test_a_different_source_releases_the_listed_nvml(fake_nvml, capsys) -> None:
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "nbgpu")
    sh.run_line_magic("gpumon", "--source sim")
    assert not fake_nvml.initialised and session.shared_sampler().simulated
    sh.run_line_magic("gpumon", "--source auto")
    assert fake_nvml.calls["nvmlInit"] == 2 and fake_nvml.initialised


def test_gpus_option_lists_from_the_listed_source(fake_nvml, capsys) -> None:
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "nbgpu")
    sh.run_line_magic("gpumon", "--gpus 0")
    assert fake_nvml.calls["nvmlInit"] == 1
    registry.panels()[0].refresh(force=True)
    assert row_titles(registry.panels()[0]) == ["GPU 0", "host"]
