"""What is read from NVML, and how: the table ``READS`` (a row per read), its readers, GPM,
probing a device at open (its details, its MIG slices, which reads it has), and the critical
XID events: one event set for every card, polled each tick with a 0 ms wait, each one a "xid"
``DeviceEvent`` (where registering is refused there are none, logged once)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .base import DeviceEvent
from .nvml_gateway import ERR_NOT_SUPPORTED, NothingNewError, NotSupportedError, NVMLCallError, NVMLGateway

log = logging.getLogger("nbgpu")

# Enumerations used below (values of the C API).
TEMPERATURE_GPU = 0
TEMPERATURE_THRESHOLD_SLOWDOWN = 1
CLOCK_SM, CLOCK_MEM = 1, 2
PCIE_TX, PCIE_RX = 0, 1
SAMPLES_POWER, SAMPLES_GPU_UTIL, SAMPLES_MEM_UTIL = 0, 1, 2
GPM_METRIC_IDS = {2: "sm_active_pct", 3: "sm_occupancy_pct", 5: "tensor_active_pct", 10: "dram_bw_pct"}


@dataclass
class _Device:
    """What NVMLSource keeps per device: handle, capabilities and buffer positions."""

    key: object
    handle: object
    parent: object
    info: dict
    caps: set[str] = field(default_factory=set)
    buffers: dict[str, int] = field(default_factory=dict)  # stream -> last timestamp (µs)
    empty_since: dict[str, float] = field(default_factory=dict)  # stream -> first empty drain
    drained_at: dict[str, float] = field(default_factory=dict)  # stream -> last drain time
    complete_at: dict[str, float] = field(default_factory=dict)  # stream -> all samples read by
    spacing_us: dict[str, float] = field(default_factory=dict)  # stream -> sample spacing (µs)
    retry_at: dict[str, float] = field(default_factory=dict)  # stream -> no drain before (s)
    gpm: list = field(default_factory=list)  # [previous, next] GPM samples once allocated
    unconfirmed: set[str] = field(default_factory=set)  # reads assumed at open, decided at first read
    probed: bool = False
    lost: bool = False


@dataclass(frozen=True)
class Read:
    """One row of the read table: ``tier`` is the name in ``due`` that asks for it ("drain": a
    sample buffer, ``buffer`` its NVML type, ``scale`` to the metric's unit); ``parent_only``: no MIG."""

    name: str
    metrics: tuple[str, ...]
    reader: Callable[[NVMLGateway, _Device], dict[str, float]] | None
    tier: str
    parent_only: bool = False
    buffer: int | None = None
    scale: float = 1.0
    probe_at_first_read: bool = False


# -- readers: fn(gateway, device) -> {metric: value}; built as (metrics, reader) -----------
Reader = Callable[[NVMLGateway, _Device], dict[str, float]]


def _calls(**metrics: tuple) -> tuple[tuple[str, ...], Reader]:
    """A reader of ``metric=(function, per, *args)`` rows: ``function(handle, *args) / per``, or of
    its first item where it answers a list (``[value, sampling period]``)."""
    def read(g: NVMLGateway, dev: _Device) -> dict[str, float]:
        got = {m: (g.call(fn, dev.handle, *args), per) for m, (fn, per, *args) in metrics.items()}
        return {m: float(v[0] if isinstance(v, (list, tuple)) else v) / per for m, (v, per) in got.items()}
    return tuple(metrics), read


def _fields(function: str, **metrics: str) -> tuple[tuple[str, ...], Reader]:
    """A reader of one call's struct: ``metric=field``."""
    def read(g: NVMLGateway, dev: _Device) -> dict[str, float]:
        got = g.call(function, dev.handle)
        return {m: float(getattr(got, name)) for m, name in metrics.items()}
    return tuple(metrics), read


def _r_reasons(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    newer = "nvmlDeviceGetCurrentClocksEventReasons"  # older bindings: only "...ThrottleReasons"
    name = newer if hasattr(g.nvml, newer) else "nvmlDeviceGetCurrentClocksThrottleReasons"
    return {"clock_event_reasons": float(g.call(name, dev.handle))}


def _gpm_setup(g: NVMLGateway, dev: _Device) -> None:
    """Allocate the two GPM samples and take the first; frees what it took if it fails."""
    if not g.call("nvmlGpmQueryDeviceSupport", dev.handle).isSupportedDevice:
        raise NotSupportedError("nvmlGpmQueryDeviceSupport", ERR_NOT_SUPPORTED, "no GPM on this GPU")
    try:
        while len(dev.gpm) < 2:
            dev.gpm.append(g.call("nvmlGpmSampleAlloc"))
        g.call("nvmlGpmSampleGet", dev.handle, dev.gpm[0])
    except NVMLCallError:
        _gpm_free(g, dev)
        raise


def _gpm_free(g: NVMLGateway, dev: _Device) -> None:
    """Free every GPM sample this device holds (they live in host memory, even on a lost GPU)."""
    while dev.gpm:
        with contextlib.suppress(NVMLCallError):
            g.call("nvmlGpmSampleFree", dev.gpm.pop())


def _r_gpm(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    if not dev.gpm:  # first read (or after a failed setup): take the first sample now
        _gpm_setup(g, dev)
        return {}
    prev, nxt = dev.gpm
    g.call("nvmlGpmSampleGet", dev.handle, nxt)
    get = g.nvml.c_nvmlGpmMetricsGet_t()
    get.version = getattr(g.nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
    get.numMetrics = len(GPM_METRIC_IDS)
    get.sample1, get.sample2 = prev, nxt
    for i, metric_id in enumerate(GPM_METRIC_IDS):
        get.metrics[i].metricId = metric_id
    g.call("nvmlGpmMetricsGet", get)
    dev.gpm.reverse()
    return {name: float(get.metrics[i].value) if get.metrics[i].nvmlReturn == 0 else np.nan
            for i, name in enumerate(GPM_METRIC_IDS.values())}


READS: tuple[Read, ...] = (
    Read("memory", *_fields("nvmlDeviceGetMemoryInfo", mem_used_bytes="used", mem_total_bytes="total"),
         "tick"),
    Read("memory_used", *_fields("nvmlDeviceGetMemoryInfo", mem_used_bytes="used"), "memory"),
    Read("util", *_fields("nvmlDeviceGetUtilizationRates", util_pct="gpu", mem_util_pct="memory"), "tick"),
    Read("temp", *_calls(temp_c=("nvmlDeviceGetTemperature", 1.0, TEMPERATURE_GPU)), "tick",
         parent_only=True),
    Read("power", *_calls(power_w=("nvmlDeviceGetPowerUsage", 1000.0)), "tick", parent_only=True),
    Read("power_limit", *_calls(power_limit_w=("nvmlDeviceGetEnforcedPowerLimit", 1000.0)), "tick",
         parent_only=True),
    Read("clocks", *_calls(sm_clock_mhz=("nvmlDeviceGetClockInfo", 1.0, CLOCK_SM),
                           mem_clock_mhz=("nvmlDeviceGetClockInfo", 1.0, CLOCK_MEM)), "tick",
         parent_only=True),
    Read("reasons", ("clock_event_reasons",), _r_reasons, "tick", parent_only=True),
    Read("codec", *_calls(enc_util_pct=("nvmlDeviceGetEncoderUtilization", 1.0),
                          dec_util_pct=("nvmlDeviceGetDecoderUtilization", 1.0)), "tick", parent_only=True),
    Read("gpm", tuple(GPM_METRIC_IDS.values()), _r_gpm, "tick", parent_only=True),
    Read("energy", *_calls(energy_j=("nvmlDeviceGetTotalEnergyConsumption", 1000.0)), "energy",
         parent_only=True),
    Read("pcie", *_calls(pcie_tx_bytes_per_s=("nvmlDeviceGetPcieThroughput", 1 / 1024, PCIE_TX),
                         pcie_rx_bytes_per_s=("nvmlDeviceGetPcieThroughput", 1 / 1024, PCIE_RX)), "pcie",
         parent_only=True, probe_at_first_read=True),
    Read("power", ("power_w",), None, "drain", parent_only=True, buffer=SAMPLES_POWER, scale=1e-3),
    Read("util", ("util_pct",), None, "drain", parent_only=True, buffer=SAMPLES_GPU_UTIL),
    Read("memutil", ("mem_util_pct",), None, "drain", parent_only=True, buffer=SAMPLES_MEM_UTIL),
)
POLLED = tuple(r for r in READS if r.buffer is None and r.reader is not None)
BUFFERED = {r.name: r for r in READS if r.buffer is not None}


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- probing at open -----------------------------------------------------------------------
def listed(g: NVMLGateway, index: int, handle, parent, simulated: bool) -> _Device:
    """A device as listed: key, handle and name; ``probe`` adds the rest."""
    key = index if parent is None else f"{parent}/{index}"
    info = {"key": key, "parent": parent, "mig": parent is not None, "simulated": simulated,
            "name": _str(g.maybe("nvmlDeviceGetName", handle) or "unknown GPU")}
    return _Device(key=key, handle=handle, parent=parent, info=info)


def probe(g: NVMLGateway, dev: _Device) -> _Device:
    """Fill in a listed device's details and find which reads it has."""
    mem = g.maybe("nvmlDeviceGetMemoryInfo", dev.handle)
    limit_mw = g.maybe("nvmlDeviceGetEnforcedPowerLimit", dev.handle)
    slowdown = g.maybe("nvmlDeviceGetTemperatureThreshold", dev.handle, TEMPERATURE_THRESHOLD_SLOWDOWN)
    dev.info.update({
        "uuid": _str(g.maybe("nvmlDeviceGetUUID", dev.handle) or ""),
        "mem_total_bytes": int(mem.total) if mem is not None else None,
        "power_limit_w": limit_mw / 1000.0 if limit_mw else None,
        "slowdown_temp_c": float(slowdown) if slowdown else None,
    })
    for row in READS:
        if row.parent_only and dev.parent is not None:
            continue
        if row.probe_at_first_read:
            dev.unconfirmed.add(row.name)
        elif not _has(g, dev, row):
            continue
        dev.caps.update(row.metrics)
    dev.probed = True
    return dev


def _has(g: NVMLGateway, dev: _Device, row: Read) -> bool:
    """Whether ``dev`` has ``row``; a transient failure counts as yes (tried again later)."""
    try:
        if row.buffer is not None:
            with contextlib.suppress(NothingNewError):  # supported, nothing buffered yet
                g.call("nvmlDeviceGetSamples", dev.handle, row.buffer, 0)
        elif row.reader is not None:
            row.reader(g, dev)
    except NotSupportedError as exc:
        log.debug("GPU %s: %s not available (%s)", dev.key, row.name, exc.text)
        return False
    except NVMLCallError as exc:
        g.log_once(logging.INFO, (dev.key, row.name, "probe"),
                   f"GPU {dev.key}: probing {row.name} failed ({exc.text}); will keep trying")
    if row.buffer is not None:
        dev.buffers[row.name] = 0
    return True


def mig_devices(g: NVMLGateway, card: _Device) -> list[_Device]:
    """The MIG slices of ``card``, probed; none where MIG mode is off."""
    mode = g.maybe("nvmlDeviceGetMigMode", card.handle)
    if not mode or mode[0] != 1:
        return []
    out = []
    for i in range(g.maybe("nvmlDeviceGetMaxMigDeviceCount", card.handle) or 0):
        if (mig := g.maybe("nvmlDeviceGetMigDeviceHandleByIndex", card.handle, i)) is not None:
            out.append(probe(g, listed(g, i, mig, card.key, card.info["simulated"])))
    return out


# -- XID events ------------------------------------------------------------------------------
XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
ERR_TIMEOUT = 10  # NVML_ERROR_TIMEOUT: no event pending
MAX_PER_POLL = 64  # a storm of events is read over several ticks, never in one long loop

# What an XID code means, after NVIDIA's XID catalogue (the commonest ones).
MEANINGS = {
    8: "GPU stopped processing (driver timeout)", 31: "GPU memory page fault (MMU fault)",
    13: "graphics engine exception (often an illegal access in a kernel)",
    32: "invalid or corrupted push buffer stream", 38: "driver firmware error",
    43: "GPU stopped processing (a context was reset)", 45: "preemptive cleanup, after earlier errors",
    48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt", 63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed", 69: "graphics engine class error",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error (the application was stopped)", 109: "context switch timeout",
    95: "uncontained ECC error (the GPU needs a reset)", 119: "GSP RPC timeout", 120: "GSP error",
    121: "C2C link error", 140: "unrecovered ECC error",
}


def meaning(code: int) -> str:
    """What XID ``code`` means, in a few words."""
    return MEANINGS.get(int(code), "see NVIDIA's XID catalogue")


def describe(gpu: object, code: int) -> str:
    """One line: ``GPU 0 reported XID 79: GPU has fallen off the bus``."""
    return f"GPU {gpu} reported XID {int(code)}: {meaning(code)}"


def decode(data: object) -> int | None:
    """The XID code of one ``nvmlEventSetWait`` answer (a ``c_nvmlEventData_t``); None if not an XID."""
    return int(data.eventData) if int(getattr(data, "eventType", 0)) & XID_EVENT else None


class XidWatch:
    """One event set registered for XIDs on ``cards`` (``_Device``s with ``handle`` and ``info``)."""

    def __init__(self, gw: NVMLGateway, cards: list) -> None:
        self._gw = gw
        self._by_uuid: dict[str, object] = {}
        self.events_set = None
        try:
            self.events_set = gw.call("nvmlEventSetCreate")
        except NVMLCallError as exc:
            gw.log_once(logging.INFO, ("xid",), f"no XID events: nvmlEventSetCreate: {exc.text}")
            return
        for dev in cards:
            try:
                gw.call("nvmlDeviceRegisterEvents", dev.handle, XID_EVENT, self.events_set)
            except NVMLCallError as exc:
                gw.log_once(logging.INFO, ("xid", dev.key), f"no XID events from GPU {dev.key}: {exc.text}")
                continue
            self._by_uuid[dev.info.get("uuid", "")] = dev.key
        if not self._by_uuid:
            self.free()

    @property
    def watching(self) -> list:
        """Keys of the cards whose XIDs are watched."""
        return list(self._by_uuid.values()) if self.events_set is not None else []

    def poll(self) -> list[DeviceEvent]:
        """The XID events pending now (none waits: a 0 ms timeout)."""
        out: list[DeviceEvent] = []
        while self.events_set is not None and len(out) < MAX_PER_POLL:
            try:
                data = self._gw.call("nvmlEventSetWait", self.events_set, 0)
            except NVMLCallError as exc:
                if exc.code != ERR_TIMEOUT:
                    self._gw.log_once(logging.WARNING, ("xid", "wait", exc.code),
                                      f"reading XID events failed: {exc.text}")
                break
            if (code := decode(data)) is not None:
                key = self._key(data)
                out.append(DeviceEvent(key, "xid", describe(key, code), code=code))
        return out

    def _key(self, data: object) -> object:
        if len(self._by_uuid) == 1:  # no UUID call, which fails on a GPU fallen off the bus
            return next(iter(self._by_uuid.values()))
        try:
            uuid = self._gw.call("nvmlDeviceGetUUID", data.device)
        except NVMLCallError:
            return None
        return self._by_uuid.get(_str(uuid))

    def free(self) -> None:
        """Free the event set (before NVML's shutdown); nothing more is polled."""
        if self.events_set is not None:
            with contextlib.suppress(NVMLCallError):
                self._gw.call("nvmlEventSetFree", self.events_set)
        self.events_set = None
