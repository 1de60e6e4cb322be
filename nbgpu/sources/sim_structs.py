"""The NVML return codes, errors and structs ``SimulatedGPUs`` answers with, as ``pynvml`` names them."""

from __future__ import annotations

import ctypes
import math
from collections import namedtuple
from dataclasses import dataclass, field

import numpy as np

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_GPM_METRICS_GET_VERSION = 1
_ERROR_NAMES = {
    1: "Uninitialized", 2: "Invalid Argument", 3: "Not Supported", 4: "Insufficient Permissions",
    6: "Not Found", 10: "Timeout", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
    13: "Function Not Found", 15: "GPU is lost", 999: "Unknown Error",
}


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
    """NVML's nvmlValue_t: the sample's value, read through the member its value type names."""

    _fields_ = (("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong), ("siVal", ctypes.c_int),
                ("usVal", ctypes.c_ushort))


class _Sample(ctypes.Structure):
    """NVML's nvmlSample_t: a CPU timestamp in µs, then the value."""

    _fields_ = (("timeStamp", ctypes.c_ulonglong), ("sampleValue", _Value))


# One unsigned-int sample's bytes (NVML's type for power and utilisation), to fill an array at once.
_UINT_SAMPLE = np.dtype({"names": ["ts", "v"], "formats": [np.ulonglong, np.uintc], "offsets": [0, 8],
                         "itemsize": ctypes.sizeof(_Sample)})


def _sample_array(ts_us: list[int], values: list[int]) -> list[_Sample]:
    """What pynvml's nvmlDeviceGetSamples returns: a slice of one ctypes array of samples."""
    n = len(ts_us)
    array = (_Sample * n)()
    rows = np.frombuffer(array, dtype=_UINT_SAMPLE)
    rows["ts"] = ts_us
    rows["v"] = values
    return array[0:n]


@dataclass(eq=False)
class _EventSet:
    types: dict[int, int] = field(default_factory=dict)  # gpu -> event types registered
    pending: list[_EventData] = field(default_factory=list)
    freed: bool = False


@dataclass(eq=False)
class _GpmSample:
    gpu: int = -1
    t: float = math.nan
    freed: bool = False


@dataclass(eq=False)
class _GpmMetric:
    metricId: int = 0  # noqa: N815
    nvmlReturn: int = 0  # noqa: N815
    value: float = 0.0


class c_nvmlGpmMetricsGet_t:  # noqa: N801 - the struct name NVMLSource builds
    def __init__(self) -> None:
        self.version = 1
        self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [_GpmMetric() for _ in range(16)]
