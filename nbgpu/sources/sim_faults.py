"""What ``SimulatedGPUs`` answers with, as ``pynvml`` names it (return codes, errors, structs),
and the faults injected into it: lost GPUs, errors, hangs, memory spikes, XIDs, processes."""

from __future__ import annotations

import ctypes
from collections import namedtuple
from dataclasses import dataclass, field

import numpy as np

from .nvml_gateway import _LAYOUTS
from .nvml_reads import XID_EVENT

NVML_ERROR_UNINITIALIZED, NVML_ERROR_INVALID_ARGUMENT, NVML_ERROR_NOT_SUPPORTED = 1, 2, 3
NVML_ERROR_NOT_FOUND, NVML_ERROR_TIMEOUT, NVML_ERROR_GPU_IS_LOST = 6, 10, 15
_ERROR_NAMES = {
    1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
    6: "Not Found", 10: "Timeout", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
    13: "Function Not Found", 15: "GPU is lost", 999: "Unknown Error",
}
HOST_PID_OFFSET = 2**22  # above any Linux pid_max: a "host PID" no process here has


class NVMLError(Exception):
    """Simulated NVML error; ``value`` is the NVML return code, as in ``pynvml``."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_NAMES.get(self.value, f"NVML error {self.value}")


_error = NVMLError

# NVML's plain structs, as pynvml's fields name them.
_Handle = namedtuple("_Handle", "gpu mig", defaults=(None,))
_Memory = namedtuple("_Memory", "total used free")
_Util = namedtuple("_Util", "gpu memory")
_Process = namedtuple("_Process", "pid usedGpuMemory")
_GpmSupport = namedtuple("_GpmSupport", "isSupportedDevice")
_EventData = namedtuple("_EventData", "device eventType eventData gpuInstanceId computeInstanceId",
                        defaults=(0xFFFFFFFF, 0xFFFFFFFF))  # c_nvmlEventData_t


class _Value(ctypes.Union):
    """NVML's nvmlValue_t (8 bytes): power and utilisation are read through ``uiVal``."""

    _fields_ = (("uiVal", ctypes.c_uint), ("ullVal", ctypes.c_ulonglong))


class _Sample(ctypes.Structure):
    """NVML's nvmlSample_t: a CPU timestamp in µs, then the value."""

    _fields_ = (("timeStamp", ctypes.c_ulonglong), ("sampleValue", _Value))


def _sample_array(ts_us: list[int], values: list[int]) -> list[_Sample]:
    """What pynvml's nvmlDeviceGetSamples returns: a slice of one ctypes array of samples."""
    array = (_Sample * len(ts_us))()
    rows = np.frombuffer(array, dtype=_LAYOUTS[1])  # NVML's value type 1: unsigned int
    rows["ts"], rows["v"] = ts_us, values
    return array[0:len(ts_us)]


@dataclass(eq=False)
class _EventSet:
    types: dict[int, int] = field(default_factory=dict)  # gpu -> event types registered
    pending: list[_EventData] = field(default_factory=list)
    freed: bool = False


class FaultInjection:
    """SimulatedGPUs' faults, processes and event sets (its ``__init__`` sets up their state)."""

    def lose_gpu(self, gpu: int) -> None:
        """From now on every call on ``gpu`` answers GPU_IS_LOST."""
        self._lost.add(gpu)

    def set_unsupported(self, function: str, gpu: int | None = None) -> None:
        """Make ``function`` answer NotSupported (on ``gpu``, or on all GPUs)."""
        self._unsupported.add((function, gpu))

    def inject_error(self, function: str, code: int, gpu: int | None = None,
                     times: int | None = None) -> None:
        """Make ``function`` raise NVML error ``code`` (``times`` calls, or until cleared)."""
        self._errors[(function, gpu)] = [code, times]

    def inject_hang(self, function: str, seconds: float, gpu: int | None = None,
                    times: int | None = 1) -> None:
        """Make ``function`` block for ``seconds`` (``times`` calls, or until ``release_hangs()``)."""
        with self._lock:
            self._release.clear()
            self._hangs[(function, gpu)] = [float(seconds), times]

    def release_hangs(self) -> None:
        """End every hang now (blocked calls return) and inject no more."""
        with self._lock:
            self._hangs.clear()
            self._release.set()

    def wait_hanging(self, timeout: float = 5.0) -> bool:
        """Block until a call is inside an injected hang; False if none started in ``timeout`` s."""
        with self._hang_entered:
            return self._hang_entered.wait_for(lambda: self.hanging > 0, timeout)

    def add_process(self, gpu: int, pid: int, used_bytes: int, *, name: str | None = None,
                    user: str | None = None) -> None:
        """List ``pid`` on ``gpu`` holding ``used_bytes``; ``name``/``user`` describe a made-up PID
        (None: looked up as usual, for a real PID)."""
        with self._lock:
            self._procs.setdefault(gpu, []).append((int(pid), int(used_bytes), name, user))

    def simulated_process(self, pid: int) -> tuple[str | None, str | None] | None:
        """(name, user) given to ``add_process`` for a made-up PID; None: look it up."""
        return next(((name, user) for procs in list(self._procs.values()) for p_pid, _b, name, user in procs
                     if self._listed_pid(p_pid) == pid and (name is not None or user is not None)), None)

    def add_memory_spike(self, gpu: int, at: float, seconds: float, extra_bytes: int) -> None:
        """Add ``extra_bytes`` of used memory on ``gpu`` from clock time ``at`` for ``seconds``."""
        with self._lock:
            self._spikes.append((gpu, float(at), float(seconds), int(extra_bytes)))

    def inject_xid(self, gpu: int, code: int) -> None:
        """Report XID ``code`` on ``gpu`` to every event set registered for it (not to later ones)."""
        with self._lock:
            for es in self._event_sets:
                if es.types.get(gpu, 0) & XID_EVENT:
                    es.pending.append(_EventData(_Handle(gpu), XID_EVENT, int(code)))

    @property
    def event_sets_live(self) -> int:
        """Event sets created and not yet freed (a leak shows as a count above zero)."""
        return sum(not es.freed for es in self._event_sets)

    # NVML's event-set calls, as pynvml names them.
    def nvmlEventSetCreate(self) -> _EventSet:  # noqa: N802
        es = _EventSet()
        with self._lock:
            self._event_sets.append(es)
        return es

    def nvmlDeviceRegisterEvents(self, h: _Handle, types: int, es: _EventSet) -> None:  # noqa: N802
        if es.freed or h.mig is not None:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        es.types[h.gpu] = es.types.get(h.gpu, 0) | int(types)

    def nvmlEventSetWait(self, es: _EventSet, timeout_ms: int) -> _EventData:  # noqa: N802
        """The oldest pending event; NVML's Timeout error at once when none is (never sleeps)."""
        if es.freed:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        with self._lock:
            if not es.pending:
                raise _error(NVML_ERROR_TIMEOUT)
            return es.pending.pop(0)

    def nvmlEventSetFree(self, es: _EventSet) -> None:  # noqa: N802
        if es.freed:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        es.freed = True

    def _listed_pid(self, pid: int) -> int:
        return pid + HOST_PID_OFFSET if self.hide_host_pids else pid

    @staticmethod
    def _take(table: dict, key: tuple) -> object:
        """The injected value at ``key`` (None: none), used once more (gone after its ``times``)."""
        entry = table.get(key)
        if entry is not None and entry[1] is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del table[key]
        return None if entry is None else entry[0]

    def _hang(self, function: str, gpu: int | None) -> None:
        with self._lock:
            key = (function, gpu) if (function, gpu) in self._hangs else (function, None)
            if (seconds := self._take(self._hangs, key)) is None:
                return
            self.hanging += 1
            self._hang_entered.notify_all()
        try:
            self._release.wait(seconds)
        finally:
            with self._lock:
                self.hanging -= 1

    def _enter(self, function: str, handle: _Handle | None = None) -> None:
        """What every NVML call passes first: counted, then any injected hang, loss or error."""
        self.calls[function] = self.calls.get(function, 0) + 1
        gpu = None if handle is None else handle.gpu
        if self._hangs:
            self._hang(function, gpu)
        if self._refcount <= 0:  # nvmlInit and nvmlShutdown do not pass here
            raise _error(NVML_ERROR_UNINITIALIZED)
        if gpu is not None and gpu in self._lost:
            raise _error(NVML_ERROR_GPU_IS_LOST)
        for key in ((function, gpu), (function, None)):
            if key in self._unsupported:
                raise _error(NVML_ERROR_NOT_SUPPORTED)
            if (code := self._take(self._errors, key)) is not None:
                raise _error(code)
