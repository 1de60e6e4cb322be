"""Simulated GPUs: a deterministic in-process stand-in for ``pynvml`` and its load model, so
demos, CI and real GPUs run the same NVML code path. Its structs and faults: ``sim_faults``."""

from __future__ import annotations

import functools
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from types import SimpleNamespace
from typing import ClassVar

import numpy as np

from ..errors import BadArgumentError
from .sim_faults import (
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    FaultInjection,
    _error,
    _GpmSupport,
    _Handle,
    _Memory,
    _Process,
    _sample_array,
    _Util,
)

WARM_S = 30.0  # past every ramp of the load model (memory reaches its level at 6 s)
SCENARIOS = ("steady", "input_bound", "leak", "oom", "imbalance", "throttle", "thin", "idle")
_INIT_ERRORS = {"driver_not_loaded": 9, "library_not_found": 12, "no_permission": 4}


_U64 = tuple(np.uint64(c) for c in (0xFFFFFFFF, 0x85EBCA6B, 0xC2B2AE35, 13, 16))


def _noise(*keys):
    """Deterministic pseudo-random number in [0, 1) from integer keys (or, elementwise, arrays)."""
    for k in keys:
        if isinstance(k, np.ndarray):
            return _noise_arrays(keys)
    return _noise_ints(keys)


@functools.lru_cache(maxsize=4096)  # a drain and the next tick ask for the same slots again
def _noise_ints(keys: tuple) -> float:
    h = 0x9E3779B1
    for k in keys:
        h = _noise_round(h, k)
    return h / 2**32


def _noise_round(h: int, k: int) -> int:
    """One key mixed into the 32-bit hash ``h``."""
    h = ((h ^ (k & 0xFFFFFFFF)) * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _noise_arrays(keys: tuple) -> np.ndarray:
    """``_noise`` elementwise: integer keys before the first array as numbers, then uint64 arrays
    updated in place (the same numbers: every step keeps 32 bits)."""
    h, arr = 0x9E3779B1, None
    low, c1, c2, s13, s16 = _U64
    for k in keys:
        if arr is None and not isinstance(k, np.ndarray):
            h = _noise_round(h, k)
            continue
        k = np.asarray(k, np.int64).astype(np.uint64)  # wraps a negative key as Python's & does
        k &= low
        if arr is None or np.shape(k) != arr.shape:
            arr = k ^ (np.uint64(h) if arr is None else arr)
        else:
            arr ^= k
        arr *= c1
        arr &= low
        arr ^= arr >> s13
        arr *= c2
        arr &= low
        arr ^= arr >> s16
    return arr / 2**32


# The load model takes seconds as a number or, for a buffer's samples at once, an array:
def _whole(x):
    """``int(x)`` (toward zero), elementwise for an array."""
    return np.trunc(x).astype(np.int64) if isinstance(x, np.ndarray) else int(x)


def _pick(cond, yes, no):
    """``yes if cond else no``, elementwise where ``cond`` is an array."""
    return np.where(cond, yes, no) if isinstance(cond, np.ndarray) else (yes if cond else no)


def _at_least(low: float, x):
    return np.maximum(low, x) if isinstance(x, np.ndarray) else max(low, x)


def _at_most(high: float, x):
    return np.minimum(high, x) if isinstance(x, np.ndarray) else min(high, x)


class SimulatedGPUs(FaultInjection):
    """A deterministic stand-in for NVML with ``count`` GPUs (0 to 64) under ``seed`` and ``clock``;
    ``scenario`` (one of ``SCENARIOS``) shapes the load, ``mig={gpu: slices}`` makes MIG slices,
    ``init_error`` fails ``nvmlInit``, ``hide_host_pids`` lists PIDs unknown here (a container),
    ``warm_s``: seconds already run, ``model_process``: the workload's memory listed under this process.
    The load model (``util_at``, ``power_at``, ...) takes seconds as a number or, for a drain's
    samples at once, an array; a subclass may return one number for a flat curve."""

    SIMULATED = True
    NVML_GPM_METRICS_GET_VERSION = 1

    def __init__(self, count: int = 2, seed: int = 0, scenario: str = "steady",
                 name: str = "NVIDIA H200", *, clock: Callable[[], float] = time.time,
                 mig: dict[int, int] | None = None, gpm: bool = True, sample_buffers: bool = True,
                 unsupported: Iterable[str] = (),
                 init_error: str | None = None, mem_total_bytes: int = 143771 * 2**20,
                 power_limit_w: float = 700.0, hide_host_pids: bool = False, warm_s: float = 0.0,
                 model_process: bool = True) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= 64:
            raise BadArgumentError(f"count must be a whole number from 0 to 64, got {count!r}")
        if scenario not in SCENARIOS:
            raise BadArgumentError(f"unknown scenario {scenario!r}; choose one of {', '.join(SCENARIOS)}")
        if init_error is not None and init_error not in _INIT_ERRORS:
            raise BadArgumentError(f"init_error must be one of {', '.join(_INIT_ERRORS)}")
        self.count, self.seed, self.scenario = count, int(seed), scenario
        self.name = name if name.endswith("(simulated)") else f"{name} (simulated)"
        self.clock, self.mig, self.gpm, self.sample_buffers = clock, dict(mig or {}), gpm, sample_buffers
        self.init_error = init_error
        self.mem_total_bytes, self.power_limit_w = int(mem_total_bytes), float(power_limit_w)
        self.start_time = clock() - float(warm_s)
        self.hide_host_pids, self.model_process = bool(hide_host_pids), bool(model_process)
        self._refcount, self._lock = 0, threading.Lock()
        # Injected faults, keyed (function, gpu or None for all): NotSupported; [value, times left].
        self._unsupported: set[tuple[str, int | None]] = {(f, None) for f in unsupported}
        self._errors: dict[tuple[str, int | None], list] = {}
        self._hangs: dict[tuple[str, int | None], list] = {}
        self._lost: set[int] = set()
        self._energy: dict[int, tuple[float, float]] = {}  # gpu -> (integrated up to t, joules)
        self._release = threading.Event()  # injected hangs end when it is set
        self.hanging = 0  # calls blocked in an injected hang right now
        self._hang_entered = threading.Condition(self._lock)
        self._procs: dict[int, list[tuple[int, int, str | None, str | None]]] = {}
        self._spikes: list[tuple[int, float, float, int]] = []
        self._event_sets: list = []  # NVML event sets made (fault injection's XIDs go there)
        self.gpm_samples_live = 0  # GPM samples allocated and not yet freed (a leak: above zero)
        self.calls: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"SimulatedGPUs(count={self.count}, seed={self.seed}, scenario={self.scenario!r})"

    # -- the load model ----------------------------------------------------------------------
    def _t(self) -> float:
        return self.clock() - self.start_time

    def util_at(self, gpu: int, t):
        """Percent of time a kernel ran on ``gpu`` around ``t`` seconds after start."""
        s = self.scenario
        if s == "idle" or (s == "imbalance" and gpu == self.count - 1):
            return 2.0 * _noise(self.seed, gpu, _whole(t * 5))
        if s == "input_bound":
            return _pick((t + 0.13 * gpu) % 1.0 < 0.25, 100.0, 0.0)
        k = _whole(t * 5)
        base = 93.0 + 6.0 * (_noise(self.seed, gpu, k) - 0.5)
        # a short evaluation / data pause every 8 s
        base = _pick((t % 8.0) < 0.6, 35.0 + 10 * _noise(self.seed, gpu, k, 1), base)
        return _pick(t < 1.5, _at_least(0.0, 10.0 * t), _at_most(100.0, base))

    def util_window(self, gpu: int, t, window: float = 0.2):
        """Mean utilisation over the ``window`` seconds before ``t`` (what NVML reports)."""
        if not isinstance(t, np.ndarray):  # one time: eight numbers cost less than arrays
            return float(sum(self.util_at(gpu, max(0.0, t - window * (i + 0.5) / 8)) for i in range(8)) / 8)
        at = _at_least(0.0, t[..., None] - window * (np.arange(8) + 0.5) / 8)
        each = np.broadcast_to(self.util_at(gpu, at), at.shape)  # (a subclass's curve may be flat)
        total = 0  # summed in order, as ``sum`` would
        for i in range(8):
            total = total + each[..., i]
        return total / 8

    def mem_used_at(self, gpu: int, t: float) -> float:
        total, base, s = self.mem_total_bytes, 0.55e9, self.scenario
        if s == "idle":
            return base
        if s == "imbalance" and gpu == self.count - 1:  # a rank that holds its model, gets no work
            return base + 0.1 * total * min(1.0, t / 6.0)
        if s == "oom":
            return base + (0.965 * total - base) * min(1.0, t / 8.0)
        used = base + 0.5 * total * min(1.0, t / 6.0)
        if s == "leak":
            used += 31e6 * t  # about +310 MB every 10 s, never freed
        return min(used + 64e6 * _noise(self.seed, gpu, int(t)), total)

    def power_at(self, gpu: int, t):
        if self.scenario == "throttle":
            return self.power_limit_w * (0.985 + 0.02 * _noise(self.seed, gpu, _whole(t * 50)))
        util = self.util_window(gpu, t, 0.1) if self.scenario == "input_bound" else self.util_at(gpu, t)
        idle = 75.0
        p = idle + (self.power_limit_w * 0.86 - idle) * util / 100.0
        return p + 8.0 * (_noise(self.seed, gpu, _whole(t * 50), 7) - 0.5)

    def temp_at(self, gpu: int, t: float) -> float:
        if self.scenario == "throttle":
            return 86.0 + 1.5 * _noise(self.seed, gpu, int(t))
        return 33.0 + 32.0 * self.power_at(gpu, t) / self.power_limit_w + _noise(self.seed, gpu, int(t))

    def simulated_host(self, t: float) -> dict[str, float] | None:
        """Host readings this scenario implies (input_bound keeps the CPU busy), else None."""
        if self.scenario == "input_bound":
            return {"proc_cpu_pct": 380.0 + 20 * _noise(self.seed, int(t)), "host_cpu_pct": 88.0}
        if self.scenario == "idle":
            return {"proc_cpu_pct": 3.0, "host_cpu_pct": 4.0}
        return None

    # -- NVML functions --------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        self.calls["nvmlInit"] = self.calls.get("nvmlInit", 0) + 1
        if self.init_error:
            raise _error(_INIT_ERRORS[self.init_error])
        with self._lock:
            self._refcount += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        with self._lock:
            if self._refcount <= 0:
                raise _error(NVML_ERROR_UNINITIALIZED)
            self._refcount -= 1

    @property
    def initialised(self) -> bool:
        """Whether someone holds an NVML reference (nvmlInit not yet paired)."""
        return self._refcount > 0

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "580.00 (simulated)"

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        if not 0 <= index < self.count:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    def nvmlDeviceGetName(self, h: _Handle) -> str:  # noqa: N802
        if h.mig is not None:
            return f"{self.name.replace(' (simulated)', '')} MIG 2g.35gb (simulated)"
        return self.name

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:  # noqa: N802
        n = int(_noise(self.seed, h.gpu, 99) * 2**32)
        if h.mig is not None:
            return f"MIG-sim{n:08x}-{h.gpu}-{h.mig}"
        return f"GPU-sim{n:08x}-0000-0000-0000-{h.gpu:012d}"

    def _mig_share(self, h: _Handle) -> float:
        return 2.0 / 7.0 if h.mig is not None else 1.0

    def nvmlDeviceGetMemoryInfo(self, h: _Handle) -> _Memory:  # noqa: N802
        share = self._mig_share(h)
        total = int(self.mem_total_bytes * share)
        used = int(self.mem_used_at(h.gpu, self._t()) * share)
        if h.mig is None:
            now = self.clock()
            used = min(total, used + sum(b for g, at, sec, b in list(self._spikes)
                                         if g == h.gpu and at <= now < at + sec))
        return _Memory(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> _Util:  # noqa: N802
        if h.mig is not None or h.gpu in self.mig:
            raise _error(NVML_ERROR_NOT_SUPPORTED)
        u = self.util_window(h.gpu, self._t())
        return _Util(gpu=round(u), memory=round(u * 0.45))

    def nvmlDeviceGetTemperature(self, h: _Handle, sensor: int) -> int:  # noqa: N802
        return round(self.temp_at(h.gpu, self._t()))

    def nvmlDeviceGetTemperatureThreshold(self, h: _Handle, kind: int) -> int:  # noqa: N802
        return {0: 95, 1: 90, 2: 87, 3: 85}.get(kind, 90)

    def nvmlDeviceGetPowerUsage(self, h: _Handle) -> int:  # noqa: N802
        if h.mig is not None:
            raise _error(NVML_ERROR_NOT_SUPPORTED)
        return int(self.power_at(h.gpu, self._t()) * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: _Handle) -> int:  # noqa: N802
        return int(self.power_limit_w * 1000)

    def nvmlDeviceGetClockInfo(self, h: _Handle, clock_type: int) -> int:  # noqa: N802
        if clock_type == 2:
            return 3201
        if self.scenario == "throttle":
            return 1410
        return 1980 if self.util_at(h.gpu, self._t()) > 5 else 345

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: _Handle) -> int:  # noqa: N802
        t = self._t()
        if self.scenario == "throttle":
            return 0x4 | (0x20 if self.temp_at(h.gpu, t) > 86.5 else 0)
        return 0x1 if self.util_at(h.gpu, t) < 5 else 0

    def nvmlDeviceGetEncoderUtilization(self, h: _Handle) -> list[int]:  # noqa: N802
        return [0, 167000]

    nvmlDeviceGetDecoderUtilization = nvmlDeviceGetEncoderUtilization  # noqa: N815

    def nvmlDeviceGetTotalEnergyConsumption(self, h: _Handle) -> int:  # noqa: N802
        """Millijoules since "driver load": power integrated on a 20 ms grid."""
        if h.mig is not None:
            raise _error(NVML_ERROR_NOT_SUPPORTED)
        t = self._t()
        with self._lock:
            k, joules = self._energy.get(h.gpu, (0.0, 5.0e6 + 1e5 * h.gpu))
            # Steps of 20 ms added one by one (as a loop would: the same float sums), up to t.
            steps = np.add.accumulate(np.r_[k, np.full(max(int((t - k) / 0.02) + 2, 0), 0.02)])[1:]
            steps = steps[:np.searchsorted(steps, t, side="right")]
            if len(steps):
                k = float(steps[-1])
                watts = np.broadcast_to(self.power_at(h.gpu, steps), steps.shape)
                joules = float(np.add.accumulate(np.r_[joules, watts * 0.02])[-1])
            self._energy[h.gpu] = (k, joules)
        return int(joules * 1000)

    def nvmlDeviceGetPcieThroughput(self, h: _Handle, counter: int) -> int:  # noqa: N802
        u = self.util_at(h.gpu, self._t())
        return int((900_000 if counter == 1 else 120_000) * (0.2 + u / 100.0))

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[_Process]:  # noqa: N802
        used = int(self.mem_used_at(h.gpu, self._t()) * self._mig_share(h))
        out = []
        if used > 0.6e9 and self.model_process:
            out.append(_Process(pid=self._listed_pid(os.getpid()), usedGpuMemory=used - int(0.55e9)))
        if h.mig is None:
            out += [_Process(pid=self._listed_pid(pid), usedGpuMemory=b)
                    for pid, b, _n, _u in list(self._procs.get(h.gpu, ()))]
        return out

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: _Handle) -> list[_Process]:  # noqa: N802
        return []

    # Sample buffers, as on an H200: power every 20 ms (2.4 s kept), utilisation every 200 ms.
    _BUFFERS: ClassVar[dict[int, tuple[float, int]]] = {0: (0.02, 120), 1: (0.2, 70), 2: (0.2, 70)}

    def nvmlDeviceGetSamples(self, h: _Handle, sampling_type: int, last_seen_us: int):  # noqa: N802
        if (not self.sample_buffers or sampling_type not in self._BUFFERS or h.mig is not None
                or (sampling_type != 0 and h.gpu in self.mig)):
            raise _error(NVML_ERROR_NOT_SUPPORTED)
        period, kept = self._BUFFERS[sampling_type]
        newest = math.floor(self._t() / period)
        k = np.arange(max(newest - kept + 1, 0), newest + 1)
        ts_us = np.round((self.start_time + k * period) * 1e6)
        fresh = ts_us > last_seen_us
        if not fresh.any():
            raise _error(NVML_ERROR_NOT_FOUND)
        return 1, _sample_array(ts_us[fresh].astype(np.int64), self._buffered(h.gpu, sampling_type,
                                                                               k[fresh] * period, period))

    def _buffered(self, gpu: int, sampling_type: int, t: np.ndarray, period: float) -> np.ndarray:
        """Buffered samples at ``t`` s after start: power in mW, or a utilisation in percent."""
        if sampling_type == 0:
            v = self.power_at(gpu, t) * 1000.0
        else:
            v = self.util_window(gpu, t, period) * (1.0 if sampling_type == 1 else 0.45)
        return np.maximum(np.round(np.broadcast_to(v, t.shape)), 0)

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:  # noqa: N802
        if h.mig is not None:
            raise _error(NVML_ERROR_NOT_SUPPORTED)
        on = 1 if h.gpu in self.mig else 0
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:  # noqa: N802
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _Handle:  # noqa: N802
        if index >= self.mig.get(h.gpu, 0):
            raise _error(NVML_ERROR_NOT_FOUND)
        return _Handle(h.gpu, index)

    def nvmlGpmQueryDeviceSupport(self, h: _Handle) -> _GpmSupport:  # noqa: N802
        return _GpmSupport(1 if self.gpm and h.mig is None else 0)

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:  # noqa: N802
        with self._lock:
            self.gpm_samples_live += 1
        return SimpleNamespace(gpu=-1, t=math.nan, freed=False)

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:  # noqa: N802
        if sample.freed:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        sample.freed = True
        with self._lock:
            self.gpm_samples_live -= 1

    def nvmlGpmSampleGet(self, h: _Handle, sample: SimpleNamespace) -> SimpleNamespace:  # noqa: N802
        sample.gpu, sample.t = h.gpu, self._t()
        return sample

    @staticmethod
    def c_nvmlGpmMetricsGet_t() -> SimpleNamespace:  # noqa: N802 - the struct pynvml names so
        metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(16)]
        return SimpleNamespace(version=1, numMetrics=0, sample1=None, sample2=None, metrics=metrics)

    def nvmlGpmMetricsGet(self, get: SimpleNamespace) -> SimpleNamespace:  # noqa: N802
        a, b = get.sample1, get.sample2
        if a is None or b is None or a.gpu != b.gpu or not b.t > a.t:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        util = sum(self.util_at(b.gpu, a.t + (b.t - a.t) * (i + 0.5) / 8) for i in range(8)) / 8
        thin = self.scenario == "thin"
        values = {2: util * (0.18 if thin else 0.95), 3: util * (0.05 if thin else 0.14),
                  5: util * (0.02 if thin else 0.6), 10: util * 0.35}
        for m in get.metrics[: get.numMetrics]:
            m.nvmlReturn, m.value = (0, values[m.metricId]) if m.metricId in values else (3, 0.0)
        return get


def _entered(function: str, fn: Callable) -> Callable:
    """``fn`` after ``_enter``: counted, then any injected hang, loss or error."""
    @functools.wraps(fn)
    def call(self: SimulatedGPUs, *args, **kwargs):
        self._enter(function, next((a for a in args[:1] if isinstance(a, _Handle)), None))
        return fn(self, *args, **kwargs)
    return call


for _name in [n for n in dir(SimulatedGPUs) if n.startswith("nvml") and n[4:] not in ("Init", "Shutdown")]:
    setattr(SimulatedGPUs, _name, _entered(_name, getattr(SimulatedGPUs, _name)))
