"""One NVML call per drain of a sample buffer, where pynvml's ``nvmlDeviceGetSamples`` makes two.

pynvml asks NVML twice for each drain: once with no array, for the number of samples, then
again to fill an array of that size. A drain's cost is a fixed time inside NVML whatever it
returns (an H200 spends 0.3 ms on a power drain and 2.5 ms on a utilisation one), which
suggests each of the two calls fetches the whole buffer. NVML fills as many samples as the
array given holds and says how many it filled, so an array larger than any buffer makes
the first call unneeded. A drain that fills the whole array may have been cut short: it is
read again the pynvml way, and the array grows for the next drains.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable, Sequence

FIRST_CAPACITY = 256  # samples: an H200 keeps 120 power and 70 utilisation samples
ERR_INSUFFICIENT_SIZE = 7


class SampleRun(Sequence):
    """The first ``count`` samples of a ctypes array NVML filled: a list of them, without copies."""

    def __init__(self, array: ctypes.Array, count: int) -> None:
        self.array = array
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        return self.array[:self.count][index]


class OneCallSamples:
    """``nvmlDeviceGetSamples(device, sampling_type, since_us)`` of a binding made as pynvml's is
    (its ``_nvmlGetFunctionPointer`` and ``c_nvmlSample_t``), in one NVML call: returns
    (value type, samples) as pynvml's does, the samples a ``SampleRun``."""

    def __init__(self, nvml) -> None:
        self._nvml = nvml
        self._sample = nvml.c_nvmlSample_t
        self._fn: Callable | None = None  # looked up at the first drain (NVML is loaded by then)
        self._lock = threading.Lock()
        self.capacity = FIRST_CAPACITY
        self.rereads = 0  # drains read again because they filled the whole array

    @staticmethod
    def available(nvml) -> bool:
        """Whether ``nvml`` has what a one-call drain needs."""
        return all(getattr(nvml, name, None) is not None
                   for name in ("_nvmlGetFunctionPointer", "c_nvmlSample_t", "NVMLError",
                                "nvmlDeviceGetSamples"))

    def __call__(self, device, sampling_type: int, since_us: int):
        fn = self._fn
        if fn is None:
            fn = self._fn = self._nvml._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
        capacity = self.capacity
        array = (self._sample * capacity)()
        value_type = ctypes.c_uint(0)
        count = ctypes.c_uint(capacity)
        ret = fn(device, ctypes.c_uint(sampling_type), ctypes.c_ulonglong(since_us),
                 ctypes.byref(value_type), ctypes.byref(count), array)
        if ret == ERR_INSUFFICIENT_SIZE or (ret == 0 and count.value >= capacity):
            return self._reread(device, sampling_type, since_us)
        if ret != 0:
            raise self._nvml.NVMLError(ret)
        return value_type.value, SampleRun(array, count.value)

    def _reread(self, device, sampling_type: int, since_us: int):
        """The drain the pynvml way (the size first), the array made large enough for next time."""
        vtype, listed = self._nvml.nvmlDeviceGetSamples(device, sampling_type, since_us)
        with self._lock:
            self.rereads += 1
            self.capacity = max(self.capacity, 2 * len(listed))
        return vtype, listed
