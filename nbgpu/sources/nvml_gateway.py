"""The NVML gateway: every NVML call goes through ``NVMLGateway.call``, which sorts failures into
not supported (a capability lacking), nothing new, fatal (GPU or driver gone) and transient;
each distinct failure is logged once. Sample buffers are read into numpy arrays here too."""

from __future__ import annotations

import ctypes
import logging
import threading

import numpy as np

from ..errors import NVMLUnavailableError

log = logging.getLogger("nbgpu")

# NVML return codes (stable values of the C API).
ERR_NOT_SUPPORTED, ERR_NOT_FOUND, ERR_DRIVER_NOT_LOADED, ERR_LIBRARY_NOT_FOUND = 3, 6, 9, 12
ERR_FUNCTION_NOT_FOUND = 13
UNSUPPORTED_CODES = frozenset({ERR_NOT_SUPPORTED, 4, ERR_FUNCTION_NOT_FOUND})  # 4: no permission
# 1: uninitialised, 15: GPU is lost, 28: GPU not found.
FATAL_CODES = frozenset({1, ERR_DRIVER_NOT_LOADED, ERR_LIBRARY_NOT_FOUND, 15, 28})

HINTS = {
    ERR_DRIVER_NOT_LOADED: "the NVIDIA driver is not loaded; check `nvidia-smi` on the host",
    ERR_LIBRARY_NOT_FOUND: "libnvidia-ml.so was not found; in a container start it with "
    "`--gpus all` (NVIDIA Container Toolkit)",
    None: "check `nvidia-smi`; in a container start it with `--gpus all`",
}
_NO_MODULE_HINT = "run `pip install nvidia-ml-py`"


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


def _text(exc: BaseException) -> str:
    try:
        return str(exc) or type(exc).__name__
    except Exception:  # pynvml's __str__ itself calls into NVML
        return type(exc).__name__


def classify(function: str, exc: BaseException) -> NVMLCallError:
    """The kind of failure an exception from an NVML call is."""
    code = getattr(exc, "value", None)
    code = code if isinstance(code, int) else None
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

    def maybe(self, function: str, *args):
        """A call whose failure only means "not known" (names, limits at probe time): None then."""
        try:
            return self.call(function, *args)
        except NVMLCallError:
            return None

    def samples(self, handle, sampling_type: int, since_us: int) -> tuple[np.ndarray, np.ndarray]:
        """(timestamps in µs, values) of one sample buffer newer than ``since_us`` (or NothingNewError),
        through pynvml's public call: the driver's read is the cost (docs/performance.md)."""
        vtype, listed = self.call("nvmlDeviceGetSamples", handle, sampling_type, since_us)
        rows = np.frombuffer(_raw(listed), dtype=_LAYOUTS[min(vtype, len(_LAYOUTS) - 1)])
        return rows["ts"].astype(np.float64), rows["v"].astype(np.float64)

    def log_once(self, level: int, key: tuple, message: str) -> None:
        """Log ``message`` the first time ``key`` is seen."""
        with self._lock:
            first = key not in self._logged
            self._logged.add(key)
        if first:
            log.log(level, message)


def unavailable(exc: NVMLCallError | None, what: str) -> NVMLUnavailableError:
    """An NVMLUnavailableError whose one line says what failed, why, and what to try."""
    code = None if exc is None else exc.code
    reason = "" if exc is None else f": {exc.text}"
    hint = HINTS.get(code, HINTS[None])
    return NVMLUnavailableError(
        f"NVML is not available ({what}{reason}); {hint}; or use source='sim' for simulated GPUs.",
        code=code, hint=hint)


SAMPLE_BYTES = 16  # c_nvmlSample_t: unsigned long long timeStamp, then an 8-byte value union
# The union member of each NVML value type (double, uint, ulong, ulonglong, longlong, int, ushort).
_VALUE_TYPES = (np.float64, np.uintc, np.uint64 if ctypes.sizeof(ctypes.c_ulong) == 8 else np.uint32,
                np.ulonglong, np.longlong, np.intc, np.ushort)
# One sample's bytes as numpy reads them, per NVML value type.
_LAYOUTS = tuple(np.dtype({"names": ["ts", "v"], "formats": [np.ulonglong, value_type],
                           "offsets": [0, 8], "itemsize": SAMPLE_BYTES}) for value_type in _VALUE_TYPES)


def _raw(listed) -> bytes | ctypes.Array:
    """The samples' bytes: pynvml's ``array[0:n]`` view read in place (3 µs for 120 samples, not
    90 µs one by one), else each sample's copied."""
    n = len(listed)
    if (n and (base := getattr(listed[0], "_b_base_", None)) is not None
            and getattr(listed[-1], "_b_base_", None) is base
            and ctypes.addressof(listed[-1]) - ctypes.addressof(listed[0]) == (n - 1) * SAMPLE_BYTES):
        return (ctypes.c_char * (n * SAMPLE_BYTES)).from_address(ctypes.addressof(listed[0]))
    return b"".join(map(bytes, listed))
