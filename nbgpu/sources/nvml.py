"""Readings from NVIDIA's NVML: the only module that talks to the NVML binding.

``NVMLSource`` works on any object with the ``pynvml`` function names: the real module
from ``nvidia-ml-py`` or ``SimulatedGPUs``, its in-process stand-in. Capabilities are
probed once per device; "not supported" removes a metric, "GPU is lost" stops a device,
other errors leave NaN and are counted. Cheap reads run every call; the energy counter,
PCIe throughput and process lists only when the sampler says they are due; NVML's own
sample buffers are drained so power and utilisation keep the card's native resolution.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..errors import NVMLUnavailableError
from ..metrics import BY_NAME
from .base import Batch, DeviceEvent, Reading

log = logging.getLogger("nbgpu")

# NVML return codes (stable values of the C API).
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_NOT_FOUND = 6
ERR_DRIVER_NOT_LOADED = 9
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_GPU_NOT_FOUND = 28
_UNSUPPORTED = {ERR_NOT_SUPPORTED, ERR_NO_PERMISSION, ERR_FUNCTION_NOT_FOUND}
_LOST = {ERR_GPU_IS_LOST, ERR_GPU_NOT_FOUND}

# Enumerations used below (values of the C API).
TEMPERATURE_GPU = 0
TEMPERATURE_THRESHOLD_SLOWDOWN = 1
CLOCK_SM, CLOCK_MEM = 1, 2
PCIE_TX, PCIE_RX = 0, 1
SAMPLES_POWER, SAMPLES_GPU_UTIL, SAMPLES_MEM_UTIL = 0, 1, 2
GPM_SM_ACTIVE, GPM_SM_OCCUPANCY, GPM_TENSOR_ACTIVE, GPM_DRAM_BW = 2, 3, 5, 10
_GPM_METRICS = {
    GPM_SM_ACTIVE: "sm_active_pct",
    GPM_SM_OCCUPANCY: "sm_occupancy_pct",
    GPM_TENSOR_ACTIVE: "tensor_active_pct",
    GPM_DRAM_BW: "dram_bw_pct",
}
# Which buffered stream feeds which metric, and how to scale the raw sample value.
_BUFFERS = {
    "power": (SAMPLES_POWER, "power_w", 1e-3),
    "util": (SAMPLES_GPU_UTIL, "util_pct", 1.0),
    "memutil": (SAMPLES_MEM_UTIL, "mem_util_pct", 1.0),
}

BUFFER_DEAD_AFTER_S = 10.0
# How often each NVML sample buffer is drained. A drain costs about 2 ms of CPU on an H200
# (measured), so each buffer is drained well inside what it holds (power ~2.4 s,
# utilisation ~14 s), not every tick; a requested energy read drains them all at once,
# so a cell's edges are never late.
DRAIN_EVERY_S = {"power": 1.0, "util": 2.0, "memutil": 2.0}

_HINTS = {
    ERR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded; check `nvidia-smi` on the host",
    ERR_LIBRARY_NOT_FOUND: "libnvidia-ml.so was not found; in a container start it with "
    "`--gpus all` (NVIDIA Container Toolkit)",
}


def _code(exc: BaseException) -> int | None:
    return getattr(exc, "value", None)


def _text(nvml, exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # pynvml's __str__ itself calls into NVML
        return type(exc).__name__


def unavailable(nvml, exc: BaseException | None, what: str) -> NVMLUnavailableError:
    """An NVMLUnavailableError whose one line says what failed, why, and what to try."""
    reason = "" if exc is None else f": {_text(nvml, exc)}"
    hint = _HINTS.get(_code(exc) if exc else None, "check `nvidia-smi`; in a container start it "
                      "with `--gpus all`")
    return NVMLUnavailableError(
        f"NVML is not available ({what}{reason}); {hint}; or use source='sim' for simulated GPUs."
    )


class _UnsupportedError(Exception):
    pass


class _LostError(Exception):
    pass


@dataclass
class _Device:
    """What NVMLSource keeps per device: handle, capabilities and buffer positions."""

    key: object
    handle: object
    info: dict
    caps: set[str] = field(default_factory=set)
    buffers: dict[str, int] = field(default_factory=dict)  # stream -> last timestamp (µs)
    empty_since: dict[str, float] = field(default_factory=dict)  # stream -> first empty drain
    drained_at: dict[str, float] = field(default_factory=dict)  # stream -> last drain time
    gpm_prev: object = None
    gpm_next: object = None
    lost: bool = False
    errors: int = 0


class NVMLSource:
    """GPUs read through NVML (real or simulated)."""

    kind = "nvml"

    def __init__(self, nvml=None) -> None:
        self._nvml = nvml
        self.simulated = bool(getattr(nvml, "SIMULATED", False))
        if self.simulated:
            self.kind = "sim"
        self._devices: list[_Device] = []
        self._opened = False
        self.driver_version = ""
        self.processes: dict[object, list[dict]] = {}
        self.last_error: str | None = None
        self._logged: set[tuple] = set()
        self._pcie_turn = 0
        self._selected: set | None = None  # device keys to read; None reads all
        self._ts_offset_us: float | None = None

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        """Initialise NVML (paired with ``close``) and probe every device once."""
        if self._opened:
            return
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise NVMLUnavailableError(
                    "NVML is not available (the `pynvml` module of nvidia-ml-py is not "
                    "installed); run `pip install nvidia-ml-py`, or use source='sim'."
                ) from exc
            self._nvml = pynvml
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except Exception as exc:
            raise unavailable(nvml, exc, "nvmlInit failed") from exc
        try:
            count = nvml.nvmlDeviceGetCount()
            if count == 0:
                raise unavailable(nvml, None, "the driver reports no GPU")
            self.driver_version = _str(self._safe(nvml.nvmlSystemGetDriverVersion) or "")
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                self._devices.append(self._probe(index, handle, parent=None))
                self._devices.extend(self._mig_devices(index, handle))
        except NVMLUnavailableError:
            nvml.nvmlShutdown()
            self._devices = []
            raise
        except Exception as exc:
            nvml.nvmlShutdown()
            self._devices = []
            raise unavailable(nvml, exc, "listing GPUs failed") from exc
        self._opened = True

    def close(self) -> None:
        """Release our NVML reference; NVML stays up for anyone else who initialised it."""
        if self._opened:
            self._opened = False
            try:
                self._nvml.nvmlShutdown()
            except Exception as exc:  # already shut down by someone else: nothing to undo
                log.debug("nvmlShutdown: %s", exc)

    def describe(self) -> str:
        names = {}
        for d in self._devices:
            if d.info["mig"]:
                continue
            names[d.info["name"]] = names.get(d.info["name"], 0) + 1
        gpus = ", ".join(f"{n}× {name}" if n > 1 else name for name, n in names.items())
        label = "simulated GPUs" if self.simulated else "GPU" + ("s" if len(self._devices) != 1 else "")
        n = sum(1 for d in self._devices if not d.info["mig"])
        return f"{n} {label}: {gpus} (driver {self.driver_version})"

    def select(self, keys: set) -> None:
        """Read only the devices with these keys from now on (the sampler's ``gpus=``)."""
        self._selected = set(keys)

    def simulated_host(self, t: float) -> dict[str, float] | None:
        """Host readings a simulated scenario implies at ``t`` s after start; None for real GPUs."""
        fn = getattr(self._nvml, "simulated_host", None) if self.simulated else None
        return fn(t) if fn is not None else None

    def _live(self) -> list[_Device]:
        return [d for d in self._devices
                if not d.lost and (self._selected is None or d.key in self._selected)]

    def devices(self) -> list[dict]:
        return [dict(d.info, metrics=sorted(d.caps & set(BY_NAME))) for d in self._devices]

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]:
        out: dict[object, dict[str, dict[str, np.dtype]]] = {}
        for d in self._devices:
            # Buffered metrics also get a tick column: the fallback if a buffer stays empty.
            tick_cols = {m: BY_NAME[m].dtype for m in sorted(d.caps) if m in BY_NAME}
            per = {"tick": tick_cols}
            for s in d.buffers:
                per[s] = {BY_NAME_FROM_BUFFER[s]: BY_NAME[BY_NAME_FROM_BUFFER[s]].dtype}
            out[d.key] = per
        return out

    # -- probing -----------------------------------------------------------------------
    def _safe(self, fn, *args):
        try:
            return fn(*args)
        except Exception:
            return None

    def _probe(self, index: int, handle, parent) -> _Device:
        nvml = self._nvml
        key = index if parent is None else f"{parent}/{index}"
        mem = self._safe(nvml.nvmlDeviceGetMemoryInfo, handle)
        limit_mw = self._safe(nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        slowdown = self._safe(nvml.nvmlDeviceGetTemperatureThreshold, handle,
                              TEMPERATURE_THRESHOLD_SLOWDOWN)
        info = {
            "index": key,
            "name": _str(self._safe(nvml.nvmlDeviceGetName, handle) or "unknown GPU"),
            "uuid": _str(self._safe(nvml.nvmlDeviceGetUUID, handle) or ""),
            "mem_total_bytes": float(mem.total) if mem is not None else float("nan"),
            "power_limit_w": limit_mw / 1000.0 if limit_mw else float("nan"),
            "slowdown_temp_c": float(slowdown) if slowdown else float("nan"),
            "mig": parent is not None,
            "parent": parent,
            "simulated": self.simulated,
        }
        dev = _Device(key=key, handle=handle, info=info)
        if parent is None:
            for stream, (stype, _metric, _scale) in _BUFFERS.items():
                try:
                    nvml.nvmlDeviceGetSamples(handle, stype, 0)
                    dev.buffers[stream] = 0
                except Exception as exc:
                    if _code(exc) == ERR_NOT_FOUND:  # supported, nothing buffered yet
                        dev.buffers[stream] = 0
        for group, reader in _READERS:
            if parent is not None and group in _PARENT_ONLY:
                continue
            try:
                reader(self, dev)
                dev.caps.update(_metric_names(group))
            except Exception as exc:
                log.debug("GPU %s: %s not available (%s)", key, group, _text(nvml, exc))
        for stream in list(dev.buffers):
            if BY_NAME_FROM_BUFFER[stream] not in dev.caps:
                dev.caps.add(BY_NAME_FROM_BUFFER[stream])
        if parent is None and self._gpm_supported(dev):
            dev.caps.update(_GPM_METRICS.values())
        for slow in ("energy", "pcie"):
            if parent is not None:
                continue
            try:
                _SLOW[slow](self, dev)
                dev.caps.update(_SLOW_METRICS[slow])
            except Exception:
                pass
        return dev

    def _gpm_supported(self, dev: _Device) -> bool:
        nvml = self._nvml
        try:
            support = nvml.nvmlGpmQueryDeviceSupport(dev.handle)
            if not support.isSupportedDevice:
                return False
            dev.gpm_prev = nvml.nvmlGpmSampleAlloc()
            dev.gpm_next = nvml.nvmlGpmSampleAlloc()
            nvml.nvmlGpmSampleGet(dev.handle, dev.gpm_prev)
            return True
        except Exception:
            dev.gpm_prev = dev.gpm_next = None
            return False

    def _mig_devices(self, index: int, handle) -> list[_Device]:
        nvml = self._nvml
        try:
            current, _pending = nvml.nvmlDeviceGetMigMode(handle)
        except Exception:
            return []
        if current != 1:
            return []
        out = []
        for i in range(self._safe(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            mig = self._safe(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, i)
            if mig is not None:
                out.append(self._probe(i, mig, parent=index))
        return out

    # -- reading -------------------------------------------------------------------------
    def read(self, now: float, due: frozenset[str]) -> Reading:
        """New readings of every live device; never raises for a device's failure."""
        reading = Reading()
        for dev in self._live():
            try:
                self._read_device(dev, now, due, reading)
            except _LostError as exc:
                dev.lost = True
                reading.events.append(DeviceEvent(dev.key, "lost", f"GPU {dev.key} was lost: {exc}"))
        if "pcie" in due:
            self._pcie_turn += 1
        return reading

    def _call(self, dev: _Device, metric: str, fn, *args):
        try:
            return fn(*args)
        except Exception as exc:
            code = _code(exc)
            if code in _LOST:
                raise _LostError(_text(self._nvml, exc)) from exc
            if code in _UNSUPPORTED:
                dev.caps.difference_update(_metric_names(metric))
                self._log_once(dev.key, metric, f"GPU {dev.key}: {metric} no longer supported")
                raise _UnsupportedError(metric) from exc
            dev.errors += 1
            self.last_error = f"GPU {dev.key} {metric}: {_text(self._nvml, exc)}"
            self._log_once(dev.key, metric, self.last_error)
            raise

    def _log_once(self, key, metric, message: str) -> None:
        if (key, metric, message) not in self._logged:
            self._logged.add((key, metric, message))
            log.warning(message)

    def _read_device(self, dev: _Device, now: float, due: frozenset[str], reading: Reading) -> None:
        jobs = list(self._cheap_jobs(dev)) if "tick" in due else []
        jobs += [(slow, fn) for slow, fn in _SLOW.items() if self._slow_due(dev, slow, due)]
        row: dict[str, float] = {}
        for group, fn in jobs:
            try:
                row.update(self._call(dev, group, fn, self, dev))
            except _LostError:
                raise
            except Exception:  # unsupported or failed: counted in _call, the value stays NaN
                continue
        if row:
            reading.batches.append(Batch(dev.key, "tick", np.array([now]),
                                         {k: np.array([v]) for k, v in row.items()}))
        for stream in list(dev.buffers):
            recent = now - dev.drained_at.get(stream, -np.inf) < DRAIN_EVERY_S[stream] - 0.05
            if recent and "energy" not in due:
                continue
            dev.drained_at[stream] = now
            batch = self._drain(dev, stream, now)
            if batch is not None:
                reading.batches.append(batch)

    def _cheap_jobs(self, dev: _Device):
        """(group, reader) of the cheap reads this device supports and has no buffer for."""
        for group, reader in _READERS:
            if not (_metric_names(group) & dev.caps):
                continue
            if group == "power" and "power" in dev.buffers:
                continue
            if group == "util" and {"util", "memutil"} <= dev.buffers.keys():
                continue
            yield group, reader
        if dev.gpm_prev is not None and "sm_active_pct" in dev.caps:
            yield "gpm", _r_gpm

    def _slow_due(self, dev: _Device, slow: str, due: frozenset[str]) -> bool:
        if slow not in due or (slow == "pcie" and not self._pcie_due(dev)):
            return False
        return slow == "procs" or bool(_SLOW_METRICS[slow] & dev.caps)

    def _pcie_due(self, dev: _Device) -> bool:
        """PCIe reads sleep ~20 ms inside NVML: one GPU per due round, in turn."""
        full = [d for d in self._live() if "pcie_rx_bytes_per_s" in d.caps]
        return bool(full) and full[self._pcie_turn % len(full)] is dev

    def _drain(self, dev: _Device, stream: str, now: float) -> Batch | None:
        """Samples NVML buffered since the last drain, at the card's own resolution."""
        stype, metric, scale = _BUFFERS[stream]
        try:
            vtype, samples = self._nvml.nvmlDeviceGetSamples(dev.handle, stype, dev.buffers[stream])
        except Exception as exc:
            code = _code(exc)
            if code in _LOST:
                raise _LostError(_text(self._nvml, exc)) from exc
            if code in _UNSUPPORTED:  # no buffer on this card: poll this metric instead
                del dev.buffers[stream]
                return None
            if code != ERR_NOT_FOUND:
                dev.errors += 1
                self.last_error = f"GPU {dev.key} {stream} samples: {_text(self._nvml, exc)}"
                self._log_once(dev.key, stream, self.last_error)
                return None
            samples = []
        if not samples:
            # "Not found" means nothing new; a buffer empty for long is treated as absent.
            since = dev.empty_since.setdefault(stream, now)
            if now - since > BUFFER_DEAD_AFTER_S:
                del dev.buffers[stream]
                self._log_once(dev.key, stream, f"GPU {dev.key}: NVML {stream} sample buffer "
                               "stays empty; polling instead")
            return None
        dev.empty_since.pop(stream, None)
        ts = np.fromiter((s.timeStamp for s in samples), dtype=np.float64, count=len(samples))
        vals = np.fromiter((_sample_value(s.sampleValue, vtype) for s in samples), dtype=np.float64,
                           count=len(samples))
        order = np.argsort(ts, kind="stable")
        ts, vals = ts[order], vals[order]
        fresh = ts > dev.buffers[stream]
        ts, vals = ts[fresh], vals[fresh]
        if not len(ts):
            return None
        dev.buffers[stream] = int(ts[-1])
        if self._ts_offset_us is None:
            # NVML stamps samples in µs of the CPU clock; guard against a different epoch.
            skew = now * 1e6 - ts[-1]
            self._ts_offset_us = skew if abs(skew) > 30e6 else 0.0
        times = (ts + self._ts_offset_us) / 1e6
        return Batch(dev.key, stream, times, {metric: vals * scale})

    def _read_gpm(self, dev: _Device) -> dict[str, float]:
        nvml = self._nvml
        nvml.nvmlGpmSampleGet(dev.handle, dev.gpm_next)
        get = nvml.c_nvmlGpmMetricsGet_t()
        get.version = getattr(nvml, "NVML_GPM_METRICS_GET_VERSION", 1)
        get.numMetrics = len(_GPM_METRICS)
        get.sample1, get.sample2 = dev.gpm_prev, dev.gpm_next
        for i, metric_id in enumerate(_GPM_METRICS):
            get.metrics[i].metricId = metric_id
        nvml.nvmlGpmMetricsGet(get)
        dev.gpm_prev, dev.gpm_next = dev.gpm_next, dev.gpm_prev
        out = {}
        for i, name in enumerate(_GPM_METRICS.values()):
            m = get.metrics[i]
            out[name] = float(m.value) if m.nvmlReturn == 0 else np.nan
        return out



def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sample_value(value, vtype: int) -> float:
    if vtype == 0:
        return float(value.dVal)
    if vtype == 1:
        return float(value.uiVal)
    if vtype == 2:
        return float(value.ulVal)
    if vtype == 3:
        return float(value.ullVal)
    if vtype == 4:
        return float(value.sllVal)
    if vtype == 5:
        return float(value.siVal)
    return float(value.usVal)


# -- per-metric readers: (group name, fn(source, device) -> {metric: value}) -----------------
def _r_memory(src: NVMLSource, dev: _Device) -> dict[str, float]:
    mem = src._nvml.nvmlDeviceGetMemoryInfo(dev.handle)
    return {"mem_used_bytes": float(mem.used), "mem_total_bytes": float(mem.total)}


def _r_util(src: NVMLSource, dev: _Device) -> dict[str, float]:
    u = src._nvml.nvmlDeviceGetUtilizationRates(dev.handle)
    return {"util_pct": float(u.gpu), "mem_util_pct": float(u.memory)}


def _r_temp(src: NVMLSource, dev: _Device) -> dict[str, float]:
    return {"temp_c": float(src._nvml.nvmlDeviceGetTemperature(dev.handle, TEMPERATURE_GPU))}


def _r_power(src: NVMLSource, dev: _Device) -> dict[str, float]:
    return {"power_w": src._nvml.nvmlDeviceGetPowerUsage(dev.handle) / 1000.0}


def _r_power_limit(src: NVMLSource, dev: _Device) -> dict[str, float]:
    return {"power_limit_w": src._nvml.nvmlDeviceGetEnforcedPowerLimit(dev.handle) / 1000.0}


def _r_clocks(src: NVMLSource, dev: _Device) -> dict[str, float]:
    nvml = src._nvml
    return {"sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(dev.handle, CLOCK_SM)),
            "mem_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(dev.handle, CLOCK_MEM))}


def _r_reasons(src: NVMLSource, dev: _Device) -> dict[str, float]:
    nvml = src._nvml
    fn = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        nvml.nvmlDeviceGetCurrentClocksThrottleReasons
    return {"clock_event_reasons": float(fn(dev.handle))}


def _r_codec(src: NVMLSource, dev: _Device) -> dict[str, float]:
    nvml = src._nvml
    return {"enc_util_pct": float(nvml.nvmlDeviceGetEncoderUtilization(dev.handle)[0]),
            "dec_util_pct": float(nvml.nvmlDeviceGetDecoderUtilization(dev.handle)[0])}


def _r_gpm(src: NVMLSource, dev: _Device) -> dict[str, float]:
    return src._read_gpm(dev)


def _r_energy(src: NVMLSource, dev: _Device) -> dict[str, float]:
    return {"energy_j": src._nvml.nvmlDeviceGetTotalEnergyConsumption(dev.handle) / 1000.0}


def _r_pcie(src: NVMLSource, dev: _Device) -> dict[str, float]:
    nvml = src._nvml
    return {"pcie_tx_bytes_per_s": nvml.nvmlDeviceGetPcieThroughput(dev.handle, PCIE_TX) * 1024.0,
            "pcie_rx_bytes_per_s": nvml.nvmlDeviceGetPcieThroughput(dev.handle, PCIE_RX) * 1024.0}


def _r_procs(src: NVMLSource, dev: _Device) -> dict[str, float]:
    nvml = src._nvml
    procs = {}
    for fn_name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        fn = getattr(nvml, fn_name, None)
        if fn is None:
            continue
        try:
            for p in fn(dev.handle):
                used = getattr(p, "usedGpuMemory", None)
                procs[p.pid] = {"pid": int(p.pid),
                                "used_bytes": float(used) if used is not None else float("nan")}
        except Exception as exc:
            if _code(exc) in _LOST:
                raise
    src.processes[dev.key] = list(procs.values())
    return {}


_READERS = (
    ("memory", _r_memory),
    ("util", _r_util),
    ("temp", _r_temp),
    ("power", _r_power),
    ("power_limit", _r_power_limit),
    ("clocks", _r_clocks),
    ("reasons", _r_reasons),
    ("codec", _r_codec),
)
_SLOW = {"energy": _r_energy, "pcie": _r_pcie, "procs": _r_procs}
_SLOW_METRICS = {"energy": {"energy_j"}, "pcie": {"pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"},
                 "procs": set()}
_PARENT_ONLY = {"power", "power_limit", "temp", "clocks", "reasons", "codec"}
_GROUPS = {
    "memory": {"mem_used_bytes", "mem_total_bytes"},
    "util": {"util_pct", "mem_util_pct"},
    "temp": {"temp_c"},
    "power": {"power_w"},
    "power_limit": {"power_limit_w"},
    "clocks": {"sm_clock_mhz", "mem_clock_mhz"},
    "reasons": {"clock_event_reasons"},
    "codec": {"enc_util_pct", "dec_util_pct"},
    "gpm": set(_GPM_METRICS.values()),
    **_SLOW_METRICS,
}
BY_NAME_FROM_BUFFER = {stream: metric for stream, (_, metric, _) in _BUFFERS.items()}


def _metric_names(group: str) -> set[str]:
    return _GROUPS.get(group, {group})

