"""GPU faults: NVML's critical XID events, from the event set to the store, status and panel."""

from __future__ import annotations

import logging

import pytest

from conftest_diagnostics import drive, sim_sampler
from nbgpu.sources import nvml_reads as nvml_events
from nbgpu.sources.nvml import NVMLSource
from nbgpu.sources.nvml_gateway import NVMLGateway
from nbgpu.sources.simulated import SimulatedGPUs


def _xid_data(code: int, event_type: int | None = None):
    """An event as ``nvmlEventSetWait`` returns it: pynvml's own struct, filled with values the
    driver reports (``NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus``)."""
    pynvml = pytest.importorskip("pynvml")
    data = pynvml.c_nvmlEventData_t()
    data.eventType = pynvml.nvmlEventTypeXidCriticalError if event_type is None else event_type
    data.eventData = code
    return data


@pytest.mark.parametrize("code, words", [
    (79, "GPU has fallen off the bus"), (48, "double-bit ECC error"), (31, "MMU fault"),
    (13, "graphics engine exception"), (43, "GPU stopped processing"), (45, "preemptive cleanup"),
    (63, "row remapping recorded"), (64, "row remapping failed"), (74, "NVLink error"),
    (92, "single-bit ECC error rate"), (94, "contained ECC error"), (95, "uncontained ECC error"),
])
def test_recorded_event_data_decodes_to_code_and_meaning(code, words):
    got = nvml_events.decode(_xid_data(code))
    assert got == code
    assert words in nvml_events.describe(0, got) and f"XID {code}" in nvml_events.describe(0, got)


def test_other_event_types_and_unknown_codes():
    pynvml = pytest.importorskip("pynvml")
    assert nvml_events.decode(_xid_data(79, pynvml.nvmlEventTypePState)) is None
    assert "XID catalogue" in nvml_events.describe(1, 999)


def _opened(sim: SimulatedGPUs) -> NVMLSource:
    src = NVMLSource(sim)
    src.open()
    return src


def test_an_injected_xid_is_read_once_at_a_tick_with_its_gpu():
    sim = SimulatedGPUs(count=2)
    src = _opened(sim)
    try:
        assert src.read(0.0, frozenset({"tick"})).events == []
        sim.inject_xid(1, 79)
        assert [e for e in src.read(0.1, frozenset({"memory"})).events if e.kind == "xid"] == []
        events = [e for e in src.read(1.0, frozenset({"tick"})).events if e.kind == "xid"]
        assert [(e.device, e.code) for e in events] == [(1, 79)]
        assert events[0].message == "GPU 1 reported XID 79: GPU has fallen off the bus"
        assert src.read(2.0, frozenset({"tick"})).events == []  # each event once
        assert sim.calls["nvmlDeviceRegisterEvents"] == 2
    finally:
        src.close()
    assert sim.event_sets_live == 0 and not sim.initialised  # freed before NVML's shutdown


def test_no_xid_events_where_registering_is_refused(caplog):
    sim = SimulatedGPUs(count=2, unsupported=("nvmlDeviceRegisterEvents",))
    with caplog.at_level(logging.INFO, logger="nbgpu"):
        src = _opened(sim)
    try:
        sim.inject_xid(0, 48)
        assert src.read(1.0, frozenset({"tick"})).events == []
        assert sim.event_sets_live == 0  # nothing registered: the set is freed at once
        assert "no XID events from GPU 0" in caplog.text
    finally:
        src.close()


def test_an_xid_reaches_the_store_the_status_and_the_panel_header():
    from nbgpu.widgets.monitor import GPUMonitor

    sim = SimulatedGPUs(count=2)
    s, clock = sim_sampler(source=sim)
    s.source.open()
    try:
        drive(s, clock, 2.0)
        mon = GPUMonitor(sampler=s, start=False)
        mon.refresh(force=True, now=clock.t)
        assert "XID" not in _texts(mon)
        sim.inject_xid(0, 48)
        drive(s, clock, 1.0)
        xids = [e for e in s.store.events_since(0) if e.kind == "xid"]
        assert [(e.device, e.extra["code"]) for e in xids] == [(0, 48)]
        assert [(x.device, x.extra["code"]) for x in s.status().xids] == [(0, 48)]
        mon.refresh(now=clock.t)
        assert "GPU 0 reported XID 48: double-bit ECC error" in _texts(mon)
        mon.close()
    finally:
        s.stop()


def _texts(widget) -> str:
    """Every HTML text of a widget tree, read through the widgets' public state."""
    out = []
    state = widget.get_state()
    if isinstance(state.get("value"), str):
        out.append(state["value"])
    for child in getattr(widget, "children", ()):
        out.append(_texts(child))
    return "\n".join(out)


def test_a_storm_of_events_is_read_over_several_ticks():
    sim = SimulatedGPUs(count=1)
    src = _opened(sim)
    try:
        for _ in range(nvml_events.MAX_PER_POLL + 5):
            sim.inject_xid(0, 13)
        first = src.read(1.0, frozenset({"tick"})).events
        second = src.read(2.0, frozenset({"tick"})).events
        assert (len(first), len(second)) == (nvml_events.MAX_PER_POLL, 5)
    finally:
        src.close()


def test_gateway_timeout_means_nothing_pending_not_an_error(caplog):
    sim = SimulatedGPUs(count=1)
    sim.nvmlInit()
    try:
        h = sim.nvmlDeviceGetHandleByIndex(0)
        dev = type("D", (), {"handle": h, "key": 0, "info": {"uuid": sim.nvmlDeviceGetUUID(h)}})()
        with caplog.at_level(logging.WARNING, logger="nbgpu"):
            watch = nvml_events.XidWatch(NVMLGateway(sim), [dev])
            assert watch.watching == [0] and watch.poll() == []
        assert caplog.text == ""
        watch.free()
        assert watch.poll() == [] and sim.event_sets_live == 0
    finally:
        sim.nvmlShutdown()


@pytest.mark.gpu
def test_real_event_set_calls_answer_timeout_when_no_xid_is_pending(nvml):
    """On a real GPU: create, register, wait 0 ms (Timeout: nothing pending), free; then the
    source's own watch on every card, polled at once with no event and no error."""
    import time

    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetSupportedEventTypes(h) & nvml.nvmlEventTypeXidCriticalError
    es = nvml.nvmlEventSetCreate()
    try:
        nvml.nvmlDeviceRegisterEvents(h, nvml.nvmlEventTypeXidCriticalError, es)
        t0 = time.perf_counter()
        with pytest.raises(nvml.NVMLError) as err:
            nvml.nvmlEventSetWait(es, 0)
        assert err.value.value == nvml.NVML_ERROR_TIMEOUT
        assert time.perf_counter() - t0 < 0.5  # a 0 ms timeout answers now
    finally:
        nvml.nvmlEventSetFree(es)
    cards = []
    for i in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        cards.append(type("Card", (), {"handle": handle, "key": i, "info": {"uuid": uuid}})())
    watch = nvml_events.XidWatch(NVMLGateway(nvml), cards)
    try:
        assert watch.watching == list(range(len(cards)))
        assert watch.poll() == []
    finally:
        watch.free()
    assert watch.events_set is None
