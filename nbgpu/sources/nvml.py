"""Readings from NVIDIA's NVML: the only module that talks to the NVML binding.

``NVMLSource`` works on any object with the ``pynvml`` function names: the real module
from ``nvidia-ml-py`` or ``SimulatedGPUs``, its in-process stand-in. Every NVML call goes
through one gateway (``NVMLGateway.call``) that sorts failures into four kinds:

- not supported (also no permission, function missing): a capability the device lacks,
  so its metrics are absent; if it happens mid-run an "unsupported" event says so;
- nothing new (``NotFound`` from a sample buffer): not an error at all;
- fatal (GPU lost, driver gone): the device stops with a "lost" event; at ``open`` an
  ``NVMLUnavailableError`` raised from the NVML error;
- anything else: transient, counted into ``Reading.errors``, the value stays NaN.

Each distinct failure is logged once. What is read, and how, is one table (``READS``):
a row per read with its metrics, reader, cost tier, whether it drains an NVML sample
buffer, and whether only a whole card (not a MIG slice) has it.
"""

from __future__ import annotations

import ctypes
import logging
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import NVMLUnavailableError
from ..metrics import BY_NAME
from .base import Batch, Device, DeviceEvent, ProcessInfo, ReadError, Reading

log = logging.getLogger("nbgpu")

# NVML return codes (stable values of the C API).
ERR_UNINITIALIZED = 1
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_NOT_FOUND = 6
ERR_DRIVER_NOT_LOADED = 9
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_GPU_NOT_FOUND = 28
UNSUPPORTED_CODES = frozenset({ERR_NOT_SUPPORTED, ERR_NO_PERMISSION, ERR_FUNCTION_NOT_FOUND})
FATAL_CODES = frozenset({ERR_UNINITIALIZED, ERR_DRIVER_NOT_LOADED, ERR_LIBRARY_NOT_FOUND,
                         ERR_GPU_IS_LOST, ERR_GPU_NOT_FOUND})

# Enumerations used below (values of the C API).
TEMPERATURE_GPU = 0
TEMPERATURE_THRESHOLD_SLOWDOWN = 1
CLOCK_SM, CLOCK_MEM = 1, 2
PCIE_TX, PCIE_RX = 0, 1
SAMPLES_POWER, SAMPLES_GPU_UTIL, SAMPLES_MEM_UTIL = 0, 1, 2
GPM_METRIC_IDS = {2: "sm_active_pct", 3: "sm_occupancy_pct", 5: "tensor_active_pct",
                  10: "dram_bw_pct"}

BUFFER_DEAD_AFTER_S = 10.0
# A drain is skipped while no new sample can exist yet: before the newest sample's time plus
# the buffer's own sample spacing (samples come evenly spaced), and, after a drain found
# nothing, for this share of the spacing (the driver publishes a sample a little late).
EMPTY_RETRY_SHARE = 0.25
# How often each NVML sample buffer is drained. On an H200 a drain costs a fixed CPU time
# whatever it returns (scripts/gpu/nvml_call_costs.py: power 0.33 ms, utilisation and
# memory utilisation 2.5 ms each), so each buffer is drained well inside what it holds
# (power ~2.4 s, utilisation ~14 s), not every tick: power every second, utilisation every
# 2 s (the panel's live value), memory-bandwidth utilisation every 10 s. Polling utilisation
# at ticks instead would alias with periodic loads (a 0.25 s burst every 1 s polled every
# 0.5 s reads 0 %), so the buffers stay the only source where they exist. An edge read (a
# capture's end asks for one) drains them all at once, so a cell's edges are never late;
# the energy counter's own periodic read drains nothing extra. A drain that cannot return
# anything yet (the next sample is not due) is skipped.
DRAIN_EVERY_S = {"power": 1.0, "util": 2.0, "memutil": 10.0}
# While nobody watches the newest values ("live" not in the reads: no panel, no exporter,
# no running cell; a script or a recording), utilisation is drained every 10 s, as memory
# utilisation always is, well inside the ~14 s the buffer holds: utilisation drains are the
# sampler's largest single cost (~1.25 ms/s at 2 s, 0.25 ms/s at 10 s). Resolution is kept;
# only how late the newest sample reaches the store changes, and the diagnostics rules judge
# a buffered metric up to where it was drained (``Sampler.drained_until``), not as missing.
# Power keeps 1 s: its buffer holds only ~2.4 s.
UNWATCHED_DRAIN_EVERY_S = {"util": 10.0}  # the streams whose period differs then

HINTS = {
    ERR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded; check `nvidia-smi` on the host",
    ERR_LIBRARY_NOT_FOUND: "libnvidia-ml.so was not found; in a container start it with "
    "`--gpus all` (NVIDIA Container Toolkit)",
    None: "check `nvidia-smi`; in a container start it with `--gpus all`",
}
_NO_MODULE_HINT = "run `pip install nvidia-ml-py`"


# -- the gateway -------------------------------------------------------------------------
class NVMLCallError(Exception):
    """An NVML call failed; subclasses say which of the four kinds it is."""

    def __init__(self, function: str, code: int | None, text: str) -> None:
        super().__init__(f"{function}: {text}")
        self.function, self.code, self.text = function, code, text


class NotSupportedError(NVMLCallError):
    """The device cannot do this (or we may not ask): a capability it lacks."""


class NothingNewError(NVMLCallError):
    """A sample buffer holds nothing newer than asked for."""


class FatalError(NVMLCallError):
    """The GPU or NVML itself is gone."""


class TransientError(NVMLCallError):
    """Any other failure: counted, and the call is tried again next time."""


def _code(exc: BaseException) -> int | None:
    code = getattr(exc, "value", None)
    return code if isinstance(code, int) else None


def _text(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # pynvml's __str__ itself calls into NVML
        return type(exc).__name__


def classify(function: str, exc: BaseException) -> NVMLCallError:
    """The kind of failure an exception from an NVML call is."""
    code = _code(exc)
    kind = (NotSupportedError if code in UNSUPPORTED_CODES else NothingNewError if code == ERR_NOT_FOUND
            else FatalError if code in FATAL_CODES else TransientError)
    return kind(function, code, _text(exc))


class NVMLGateway:
    """The one way NVML is called: classifies failures and logs each distinct one once."""

    def __init__(self, nvml) -> None:
        self.nvml = nvml
        self._logged: set[tuple] = set()
        self._lock = threading.Lock()

    def call(self, function: str, *args):
        """``nvml.<function>(*args)``, or an ``NVMLCallError`` of the right kind raised from it."""
        fn = getattr(self.nvml, function, None)
        if fn is None:
            raise NotSupportedError(function, ERR_FUNCTION_NOT_FOUND, "not in this NVML binding")
        try:
            return fn(*args)
        except Exception as exc:
            raise classify(function, exc) from exc

    def samples(self, handle, sampling_type: int, since_us: int) -> tuple[np.ndarray, np.ndarray]:
        """(timestamps in µs, values) of one NVML sample buffer newer than ``since_us``.

        Raises ``NothingNewError`` when nothing is newer.
        """
        vtype, listed = self.call("nvmlDeviceGetSamples", handle, sampling_type, since_us)
        packed = _packed_samples(listed, vtype)
        if packed is not None:
            return packed
        ts = np.fromiter((s.timeStamp for s in listed), dtype=np.float64, count=len(listed))
        vals = np.fromiter((_sample_value(s.sampleValue, vtype) for s in listed), dtype=np.float64,
                           count=len(listed))
        return ts, vals

    def call_first(self, functions: tuple[str, ...], *args):
        """The first of ``functions`` this binding has (newer names first)."""
        for function in functions[:-1]:
            if getattr(self.nvml, function, None) is not None:
                return self.call(function, *args)
        return self.call(functions[-1], *args)

    def attr(self, name: str, default=None):
        """A constant or struct type of the binding (no call, nothing to classify)."""
        return getattr(self.nvml, name, default)

    def log_once(self, level: int, key: tuple, message: str) -> bool:
        """Log ``message`` the first time ``key`` is seen; True if it was logged now."""
        with self._lock:
            if key in self._logged:
                return False
            self._logged.add(key)
        log.log(level, message)
        return True


def unavailable(exc: BaseException | None, what: str) -> NVMLUnavailableError:
    """An NVMLUnavailableError whose one line says what failed, why, and what to try."""
    code = None if exc is None else (exc.code if isinstance(exc, NVMLCallError) else _code(exc))
    reason = "" if exc is None else f": {exc.text if isinstance(exc, NVMLCallError) else _text(exc)}"
    hint = HINTS.get(code, HINTS[None])
    return NVMLUnavailableError(
        f"NVML is not available ({what}{reason}); {hint}; or use source='sim' for simulated GPUs.",
        code=code, hint=hint)


# -- what is kept per device -------------------------------------------------------------
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
    errors: int = 0


@dataclass(frozen=True)
class Read:
    """One row of the read table.

    ``tier`` is the name in ``due`` that asks for it ("tick", "memory", "energy", "pcie",
    "procs", or "drain" for sample buffers, drained on their own schedule); ``buffer`` is
    the NVML sampling type it drains (None: polled); ``scale`` turns raw samples into the
    metric's unit; ``parent_only``: a MIG slice does not have it.
    """

    name: str
    metrics: tuple[str, ...]
    reader: Callable[[NVMLGateway, _Device], dict[str, float]] | None
    tier: str
    parent_only: bool = False
    buffer: int | None = None
    scale: float = 1.0
    probe_at_first_read: bool = False


# -- readers: fn(gateway, device) -> {metric: value} -------------------------------------
def _r_memory(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    mem = g.call("nvmlDeviceGetMemoryInfo", dev.handle)
    return {"mem_used_bytes": float(mem.used), "mem_total_bytes": float(mem.total)}


def _r_memory_used(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    return {"mem_used_bytes": float(g.call("nvmlDeviceGetMemoryInfo", dev.handle).used)}


def _r_util(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    u = g.call("nvmlDeviceGetUtilizationRates", dev.handle)
    return {"util_pct": float(u.gpu), "mem_util_pct": float(u.memory)}


def _r_temp(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    return {"temp_c": float(g.call("nvmlDeviceGetTemperature", dev.handle, TEMPERATURE_GPU))}


def _r_power(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    return {"power_w": g.call("nvmlDeviceGetPowerUsage", dev.handle) / 1000.0}


def _r_power_limit(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    return {"power_limit_w": g.call("nvmlDeviceGetEnforcedPowerLimit", dev.handle) / 1000.0}


def _r_clocks(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    return {"sm_clock_mhz": float(g.call("nvmlDeviceGetClockInfo", dev.handle, CLOCK_SM)),
            "mem_clock_mhz": float(g.call("nvmlDeviceGetClockInfo", dev.handle, CLOCK_MEM))}


def _r_reasons(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    bits = g.call_first(("nvmlDeviceGetCurrentClocksEventReasons",
                         "nvmlDeviceGetCurrentClocksThrottleReasons"), dev.handle)
    return {"clock_event_reasons": float(bits)}


def _r_codec(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    return {"enc_util_pct": float(g.call("nvmlDeviceGetEncoderUtilization", dev.handle)[0]),
            "dec_util_pct": float(g.call("nvmlDeviceGetDecoderUtilization", dev.handle)[0])}


def _r_energy(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    return {"energy_j": g.call("nvmlDeviceGetTotalEnergyConsumption", dev.handle) / 1000.0}


def _r_pcie(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    return {"pcie_tx_bytes_per_s": g.call("nvmlDeviceGetPcieThroughput", dev.handle, PCIE_TX) * 1024.0,
            "pcie_rx_bytes_per_s": g.call("nvmlDeviceGetPcieThroughput", dev.handle, PCIE_RX) * 1024.0}


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
        sample = dev.gpm.pop()
        try:
            g.call("nvmlGpmSampleFree", sample)
        except NVMLCallError as exc:
            log.debug("nvmlGpmSampleFree: %s", exc)


def _r_gpm(g: NVMLGateway, dev: _Device) -> dict[str, float]:
    if not dev.gpm:  # first read (or after a failed setup): take the first sample now
        _gpm_setup(g, dev)
        return {}
    prev, nxt = dev.gpm
    g.call("nvmlGpmSampleGet", dev.handle, nxt)
    get = g.attr("c_nvmlGpmMetricsGet_t")()
    get.version = g.attr("NVML_GPM_METRICS_GET_VERSION", 1)
    get.numMetrics = len(GPM_METRIC_IDS)
    get.sample1, get.sample2 = prev, nxt
    for i, metric_id in enumerate(GPM_METRIC_IDS):
        get.metrics[i].metricId = metric_id
    g.call("nvmlGpmMetricsGet", get)
    dev.gpm.reverse()
    out = {}
    for i, name in enumerate(GPM_METRIC_IDS.values()):
        m = get.metrics[i]
        out[name] = float(m.value) if m.nvmlReturn == 0 else np.nan
    return out


READS: tuple[Read, ...] = (
    Read("memory", ("mem_used_bytes", "mem_total_bytes"), _r_memory, "tick"),
    Read("memory_used", ("mem_used_bytes",), _r_memory_used, "memory"),
    Read("util", ("util_pct", "mem_util_pct"), _r_util, "tick"),
    Read("temp", ("temp_c",), _r_temp, "tick", parent_only=True),
    Read("power", ("power_w",), _r_power, "tick", parent_only=True),
    Read("power_limit", ("power_limit_w",), _r_power_limit, "tick", parent_only=True),
    Read("clocks", ("sm_clock_mhz", "mem_clock_mhz"), _r_clocks, "tick", parent_only=True),
    Read("reasons", ("clock_event_reasons",), _r_reasons, "tick", parent_only=True),
    Read("codec", ("enc_util_pct", "dec_util_pct"), _r_codec, "tick", parent_only=True),
    Read("gpm", tuple(GPM_METRIC_IDS.values()), _r_gpm, "tick", parent_only=True),
    Read("energy", ("energy_j",), _r_energy, "energy", parent_only=True),
    Read("pcie", ("pcie_rx_bytes_per_s", "pcie_tx_bytes_per_s"), _r_pcie, "pcie",
         parent_only=True, probe_at_first_read=True),
    Read("procs", (), None, "procs"),
    Read("power", ("power_w",), None, "drain", parent_only=True, buffer=SAMPLES_POWER,
         scale=1e-3),
    Read("util", ("util_pct",), None, "drain", parent_only=True, buffer=SAMPLES_GPU_UTIL),
    Read("memutil", ("mem_util_pct",), None, "drain", parent_only=True,
         buffer=SAMPLES_MEM_UTIL),
)
POLLED = tuple(r for r in READS if r.buffer is None and r.reader is not None)
BUFFERED = {r.name: r for r in READS if r.buffer is not None}


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


SAMPLE_BYTES = 16  # c_nvmlSample_t: unsigned long long timeStamp, then an 8-byte value union
# The union member of each NVML value type (double, uint, ulong, ulonglong, longlong, int,
# ushort) as a numpy type in this machine's byte order.
_VALUE_TYPES = (np.float64, np.uintc, np.uint64 if ctypes.sizeof(ctypes.c_ulong) == 8 else np.uint32,
                np.ulonglong, np.longlong, np.intc, np.ushort)


# One sample's bytes as numpy reads them, per NVML value type (built once, not per drain).
_LAYOUTS = tuple(np.dtype({"names": ["ts", "v"], "formats": [np.ulonglong, value_type],
                           "offsets": [0, 8], "itemsize": SAMPLE_BYTES}) for value_type in _VALUE_TYPES)


def _packed_samples(listed, vtype: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(timestamps, values) read straight from the ctypes array pynvml's samples slice views.

    pynvml returns ``array[0:n]``: structs that share one contiguous buffer, so numpy reads
    it at once (3 µs for 120 samples, against 90 µs attribute by attribute). None where the
    samples are not such a view (the simulated stand-in, another binding): read them one by one.
    """
    if not listed or not 0 <= vtype < len(_VALUE_TYPES):
        return None
    first, last = listed[0], listed[-1]
    base = getattr(first, "_b_base_", None)
    try:
        if (base is None or getattr(last, "_b_base_", None) is not base
                or ctypes.sizeof(first) != SAMPLE_BYTES
                or ctypes.addressof(last) - ctypes.addressof(first) != (len(listed) - 1) * SAMPLE_BYTES):
            return None
        buffer = (ctypes.c_char * (len(listed) * SAMPLE_BYTES)).from_address(ctypes.addressof(first))
    except TypeError:  # not ctypes objects
        return None
    rows = np.frombuffer(buffer, dtype=_LAYOUTS[vtype])
    return rows["ts"].astype(np.float64), rows["v"].astype(np.float64)


def _sample_value(value, vtype: int) -> float:
    member = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal")
    return float(getattr(value, member[vtype] if 0 <= vtype < len(member) else "usVal"))


class NVMLSource:
    """GPUs read through NVML (real or simulated)."""

    kind = "nvml"

    def __init__(self, nvml=None) -> None:
        self._nvml = nvml
        self.simulated = bool(getattr(nvml, "SIMULATED", False))
        if self.simulated:
            self.kind = "sim"
        self._gw: NVMLGateway | None = None
        self._devices: list[_Device] = []
        self._opened = False
        self.driver_version = ""
        self._processes: dict[object, list[ProcessInfo]] = {}
        self._pid_names: dict[int, tuple[str | None, str | None]] = {}
        self.last_error: str | None = None
        self._pcie_turn = 0
        self._selected: set | None = None  # device keys to read; None reads all
        self._ts_offset_us: float | None = None

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        """Initialise NVML (paired with ``close``) and probe every device once.

        After ``open_listing`` this only probes, on the NVML reference already held.
        """
        self.open_listing()
        if all(d.probed for d in self._devices):
            return
        try:
            probed: list[_Device] = []
            for dev in self._devices:
                if dev.parent is None:
                    probed.append(self._probe(dev))
                    probed.extend(self._mig_devices(dev.key, dev.handle))
            self._devices = probed
        except (NVMLUnavailableError, NVMLCallError) as exc:
            self._fail()
            if isinstance(exc, NVMLUnavailableError):
                raise
            raise unavailable(exc, "probing GPUs failed") from exc.__cause__

    def open_listing(self) -> None:
        """Initialise NVML and list the GPUs (names, driver) without probing what each reads.

        Enough for ``describe()`` and the cards' keys (``%load_ext``'s one line); ``open()``
        later probes on the same NVML reference, so NVML is initialised once.
        """
        if self._opened:
            return
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise NVMLUnavailableError(
                    "NVML is not available (the `pynvml` module of nvidia-ml-py is not "
                    f"installed); {_NO_MODULE_HINT}, or use source='sim'.",
                    hint=_NO_MODULE_HINT) from exc
            self._nvml = pynvml
        g = self._gw = NVMLGateway(self._nvml)
        self._devices, self._processes = [], {}
        try:
            g.call("nvmlInit")
        except NVMLCallError as exc:
            raise unavailable(exc, "nvmlInit failed") from exc.__cause__
        try:
            count = g.call("nvmlDeviceGetCount")
            if count == 0:
                raise unavailable(None, "the driver reports no GPU")
            self.driver_version = _str(self._maybe("nvmlSystemGetDriverVersion") or "")
            for index in range(count):
                handle = g.call("nvmlDeviceGetHandleByIndex", index)
                self._devices.append(self._listed(index, handle, parent=None))
        except (NVMLUnavailableError, NVMLCallError) as exc:
            self._fail()
            if isinstance(exc, NVMLUnavailableError):
                raise
            raise unavailable(exc, "listing GPUs failed") from exc.__cause__
        self._opened = True

    def _fail(self) -> None:
        """Undo a failed open: free what was taken and drop NVML's reference."""
        self._release()
        self._devices = []
        self._opened = False

    def close(self) -> None:
        """Free GPM samples and release our NVML reference; others' NVML stays up.

        ``devices()`` still describes what was there, so views can label old data.
        """
        if self._opened:
            self._opened = False
            self._release()

    def _release(self) -> None:
        for dev in self._devices:
            _gpm_free(self._gw, dev)
        try:
            self._gw.call("nvmlShutdown")
        except NVMLCallError as exc:  # already shut down by someone else: nothing to undo
            log.debug("nvmlShutdown: %s", exc)

    def describe(self) -> str:
        cards = [d for d in self._devices if d.parent is None]
        names: dict[str, int] = {}
        for d in cards:
            names[d.info["name"]] = names.get(d.info["name"], 0) + 1
        gpus = ", ".join(f"{n}× {name}" if n > 1 else name for name, n in names.items())
        label = "simulated GPUs" if self.simulated else "GPU" + ("s" if len(cards) != 1 else "")
        return f"{len(cards)} {label}: {gpus} (driver {self.driver_version})"

    def select(self, keys: set) -> None:
        """Read only the devices with these keys from now on (the sampler's ``gpus=``)."""
        self._selected = set(keys)

    def simulated_host(self, t: float) -> dict[str, float] | None:
        """Host readings a simulated scenario implies at ``t`` s after start; None for real GPUs."""
        fn = getattr(self._nvml, "simulated_host", None) if self.simulated else None
        return fn(t) if fn is not None else None

    @property
    def processes(self) -> dict[object, list[ProcessInfo]]:
        """The latest process lists per device: a snapshot, replaced whole, never mutated."""
        return self._processes

    def drained_until(self, key: object, metric: str | None = None) -> float:
        """Clock time up to which every sample buffer of GPU ``key`` (or the one holding
        ``metric``) is in the readings.

        A buffered sample reaches the store at its buffer's next drain, seconds after its
        time; a writer that folds samples into ticks waits for this (inf: nothing pending,
        or ``metric`` is not buffered). One sample spacing is kept back, as the driver
        publishes a sample a little late.
        """
        dev = next((d for d in self._devices if d.key == key), None)
        if dev is None or dev.lost or not dev.buffers:
            return math.inf
        return min((dev.complete_at.get(stream, -math.inf) - dev.spacing_us.get(stream, 0.0) / 1e6
                    for stream in dev.buffers
                    if metric is None or metric in BUFFERED[stream].metrics), default=math.inf)

    def _live(self) -> list[_Device]:
        return [d for d in self._devices
                if not d.lost and (self._selected is None or d.key in self._selected)]

    def devices(self) -> list[Device]:
        return [Device(metrics=tuple(sorted(d.caps & set(BY_NAME))), **d.info)
                for d in self._devices]

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]:
        out: dict[object, dict[str, dict[str, np.dtype]]] = {}
        for d in self._devices:
            # Buffered metrics also get a tick column: the fallback if a buffer stays empty.
            per = {"tick": {m: BY_NAME[m].dtype for m in sorted(d.caps) if m in BY_NAME}}
            if "mem_used_bytes" in d.caps:
                per["memory"] = {"mem_used_bytes": BY_NAME["mem_used_bytes"].dtype}
            for s in d.buffers:
                metric = BUFFERED[s].metrics[0]
                per[s] = {metric: BY_NAME[metric].dtype}
            out[d.key] = per
        return out

    # -- probing -----------------------------------------------------------------------
    def _maybe(self, function: str, *args):
        """A call whose failure only means "not known" (names, limits at probe time)."""
        try:
            return self._gw.call(function, *args)
        except NVMLCallError:
            return None

    def _listed(self, index: int, handle, parent) -> _Device:
        """A device as listed: key, handle and name; ``_probe`` adds the rest."""
        key = index if parent is None else f"{parent}/{index}"
        info = {"key": key, "parent": parent, "mig": parent is not None,
                "name": _str(self._maybe("nvmlDeviceGetName", handle) or "unknown GPU"),
                "uuid": "", "mem_total_bytes": None, "power_limit_w": None,
                "slowdown_temp_c": None, "simulated": self.simulated}
        return _Device(key=key, handle=handle, parent=parent, info=info)

    def _probe(self, dev: _Device) -> _Device:
        """Fill in a listed device's details and find which reads it has."""
        handle = dev.handle
        mem = self._maybe("nvmlDeviceGetMemoryInfo", handle)
        limit_mw = self._maybe("nvmlDeviceGetEnforcedPowerLimit", handle)
        slowdown = self._maybe("nvmlDeviceGetTemperatureThreshold", handle,
                               TEMPERATURE_THRESHOLD_SLOWDOWN)
        dev.info.update({
            "uuid": _str(self._maybe("nvmlDeviceGetUUID", handle) or ""),
            "mem_total_bytes": int(mem.total) if mem is not None else None,
            "power_limit_w": limit_mw / 1000.0 if limit_mw else None,
            "slowdown_temp_c": float(slowdown) if slowdown else None,
        })
        for row in READS:
            if row.parent_only and dev.parent is not None:
                continue
            if row.probe_at_first_read:
                dev.unconfirmed.add(row.name)
                dev.caps.update(row.metrics)
            elif self._probe_read(dev, row):
                dev.caps.update(row.metrics)
        dev.probed = True
        return dev

    def _probe_read(self, dev: _Device, row: Read) -> bool:
        """Whether ``dev`` has ``row``; a transient failure counts as yes (tried again later)."""
        try:
            if row.buffer is not None:
                try:
                    self._gw.call("nvmlDeviceGetSamples", dev.handle, row.buffer, 0)
                except NothingNewError:  # supported, nothing buffered yet
                    pass
                dev.buffers[row.name] = 0
            elif row.reader is not None:
                row.reader(self._gw, dev)
            return True
        except NotSupportedError as exc:
            log.debug("GPU %s: %s not available (%s)", dev.key, row.name, exc.text)
            return False
        except NVMLCallError as exc:
            self._gw.log_once(logging.INFO, (dev.key, row.name, "probe"),
                              f"GPU {dev.key}: probing {row.name} failed ({exc.text}); "
                              "will keep trying")
            if row.buffer is not None:
                dev.buffers[row.name] = 0
            return True

    def _mig_devices(self, index: int, handle) -> list[_Device]:
        mode = self._maybe("nvmlDeviceGetMigMode", handle)
        if not mode or mode[0] != 1:
            return []
        out = []
        for i in range(self._maybe("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = self._maybe("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
            if mig is not None:
                out.append(self._probe(self._listed(i, mig, parent=index)))
        return out

    # -- reading -------------------------------------------------------------------------
    def read(self, now: float, due: frozenset[str]) -> Reading:
        """New readings of every live device; never raises for a device's failure."""
        reading = Reading()
        procs: dict[object, list[ProcessInfo]] = {}
        for dev in self._live():
            try:
                self._read_device(dev, now, due, reading)
                if "procs" in due:
                    procs[dev.key] = self._read_processes(dev, reading)
            except FatalError as exc:
                dev.lost = True
                _gpm_free(self._gw, dev)
                reading.events.append(DeviceEvent(dev.key, "lost",
                                                  f"GPU {dev.key} was lost: {exc.text}"))
        if procs:  # one new snapshot, swapped in whole: readers never see it change
            self._processes = {**self._processes, **procs}
            listed = {p.pid for ps in self._processes.values() for p in ps}
            self._pid_names = {pid: v for pid, v in self._pid_names.items() if pid in listed}
        if "pcie" in due:
            self._pcie_turn += 1
        return reading

    def _wanted(self, dev: _Device, row: Read, due: frozenset[str]) -> bool:
        if dev.caps.isdisjoint(row.metrics):
            return False
        if row.tier == "tick":
            if row.name == "power" and "power" in dev.buffers:
                return False
            if row.name == "util" and {"util", "memutil"} <= dev.buffers.keys():
                return False
            return "tick" in due
        if row.tier == "memory":  # the fast-memory lane, and a capture's edge
            return ("memory" in due or "edge" in due) and "tick" not in due
        if row.tier == "pcie":
            return "pcie" in due and self._pcie_due(dev)
        return row.tier in due

    def _read_device(self, dev: _Device, now: float, due: frozenset[str], reading: Reading) -> None:
        row_values: dict[str, float] = {}
        memory: dict[str, float] = {}
        for row in POLLED:
            if not self._wanted(dev, row, due):
                continue
            values = self._run(dev, row, reading)
            (memory if row.tier == "memory" else row_values).update(values)
        for stream, values in (("tick", row_values), ("memory", memory)):
            if values:
                reading.batches.append(Batch(dev.key, stream, now, values))
        edge = "edge" in due
        unwatched = {} if "live" in due else UNWATCHED_DRAIN_EVERY_S
        for stream in list(dev.buffers):
            every_s = unwatched.get(stream) or DRAIN_EVERY_S[stream]
            recent = now - dev.drained_at.get(stream, -np.inf) < every_s - 0.05
            if recent and not edge:
                continue
            if self._nothing_new_yet(dev, stream, now):
                dev.complete_at[stream] = now  # no sample stamped before now is left to read
                continue
            dev.drained_at[stream] = now
            batch = self._drain(dev, BUFFERED[stream], now, reading)
            if batch is not None:
                reading.batches.append(batch)

    def _run(self, dev: _Device, row: Read, reading: Reading) -> dict[str, float]:
        """One read of the table through the gateway: values, or {} with the failure recorded."""
        try:
            values = row.reader(self._gw, dev)
            dev.unconfirmed.discard(row.name)
            return values
        except NotSupportedError as exc:
            gone = tuple(sorted(set(row.metrics) & dev.caps))
            dev.caps.difference_update(row.metrics)
            if row.name == "gpm":
                _gpm_free(self._gw, dev)
            if row.name in dev.unconfirmed:  # its probe, made late: never supported here
                dev.unconfirmed.discard(row.name)
                message = f"GPU {dev.key}: {row.name} is not supported ({exc.text})"
                log.debug(message)
            else:
                message = f"GPU {dev.key}: {row.name} is no longer supported ({exc.text})"
                self._gw.log_once(logging.WARNING, (dev.key, row.name, "unsupported"), message)
            reading.events.append(DeviceEvent(dev.key, "unsupported", message, gone))
        except (TransientError, NothingNewError) as exc:
            self._transient(dev, row.name, exc, reading)
        return {}

    def _transient(self, dev: _Device, read: str, exc: NVMLCallError, reading: Reading) -> None:
        dev.errors += 1
        message = f"GPU {dev.key} {read}: {exc.text}"
        self.last_error = message
        reading.errors.append(ReadError(dev.key, read, exc.text))
        self._gw.log_once(logging.WARNING, (dev.key, read, exc.code), message)

    def _pcie_due(self, dev: _Device) -> bool:
        """PCIe reads sleep ~20 ms inside NVML: one GPU per due round, in turn."""
        full = [d for d in self._live() if "pcie_rx_bytes_per_s" in d.caps]
        return bool(full) and full[self._pcie_turn % len(full)] is dev

    def _drain(self, dev: _Device, row: Read, now: float, reading: Reading) -> Batch | None:
        """Samples NVML buffered since the last drain, at the card's own resolution."""
        stream, metric = row.name, row.metrics[0]
        try:
            ts, vals = self._gw.samples(dev.handle, row.buffer, dev.buffers[stream])
        except NotSupportedError:  # no buffer on this card after all: poll this metric instead
            del dev.buffers[stream]
            return None
        except NothingNewError:
            ts = vals = np.empty(0)
        except TransientError as exc:
            self._transient(dev, f"{stream} samples", exc, reading)
            return None
        dev.complete_at[stream] = now  # every sample stamped before now is read (or none was new)
        if not len(ts):
            # "Not found" means nothing new; a buffer empty for long is treated as absent.
            if stream in dev.spacing_us:
                dev.retry_at[stream] = now + EMPTY_RETRY_SHARE * dev.spacing_us[stream] / 1e6
            since = dev.empty_since.setdefault(stream, now)
            if now - since > BUFFER_DEAD_AFTER_S:
                del dev.buffers[stream]
                self._gw.log_once(logging.WARNING, (dev.key, stream, "empty"),
                                  f"GPU {dev.key}: NVML {stream} sample buffer stays empty; "
                                  "polling instead")
            return None
        dev.empty_since.pop(stream, None)
        order = np.argsort(ts, kind="stable")
        ts, vals = ts[order], vals[order]
        fresh = ts > dev.buffers[stream]
        ts, vals = ts[fresh], vals[fresh]
        if not len(ts):
            return None
        if len(ts) > 1:  # samples come evenly spaced: their mean spacing is the period
            dev.spacing_us[stream] = float(ts[-1] - ts[0]) / (len(ts) - 1)
        dev.buffers[stream] = int(ts[-1])
        if self._ts_offset_us is None:
            # NVML stamps samples in µs of the CPU clock; guard against a different epoch.
            skew = now * 1e6 - ts[-1]
            self._ts_offset_us = skew if abs(skew) > 30e6 else 0.0
        times = (ts + self._ts_offset_us) / 1e6
        return Batch(dev.key, stream, times, {metric: vals * row.scale})

    def _nothing_new_yet(self, dev: _Device, stream: str, now: float) -> bool:
        """Whether the buffer cannot hold a sample newer than the last one drained yet."""
        spacing = dev.spacing_us.get(stream)
        if spacing is None or self._ts_offset_us is None or not dev.buffers.get(stream):
            return False
        if now < dev.retry_at.get(stream, -np.inf):
            return True
        return now * 1e6 - self._ts_offset_us < dev.buffers[stream] + spacing

    def _read_processes(self, dev: _Device, reading: Reading) -> list[ProcessInfo]:
        """Compute and graphics processes on ``dev``, with name and user where visible here."""
        found: dict[int, int | None] = {}
        for function in ("nvmlDeviceGetComputeRunningProcesses",
                         "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                listed = self._gw.call(function, dev.handle)
            except NotSupportedError:
                continue
            except (TransientError, NothingNewError) as exc:
                self._transient(dev, "procs", exc, reading)
                return list(self._processes.get(dev.key, ()))
            for p in listed:
                used = getattr(p, "usedGpuMemory", None)
                found[int(p.pid)] = int(used) if isinstance(used, int) else None
        return [ProcessInfo(pid, used, *self._who(pid)) for pid, used in found.items()]

    def _who(self, pid: int) -> tuple[str | None, str | None]:
        """(name, user) of a PID visible in this PID namespace, else (None, None)."""
        hook = getattr(self._nvml, "simulated_process", None) if self.simulated else None
        if hook is not None:
            known = hook(pid)
            if known is not None:
                return known
        if pid not in self._pid_names:
            self._pid_names[pid] = _who_psutil(pid)
        return self._pid_names[pid]


def _who_psutil(pid: int) -> tuple[str | None, str | None]:
    try:
        import psutil

        proc = psutil.Process(pid)
        return proc.name(), proc.username()
    except Exception:  # not in this PID namespace, gone, or not ours to look at
        return None, None
