"""Where readings come from: NVML (real or simulated), the host, Prometheus."""

from __future__ import annotations

from ..errors import BadArgumentError
from .base import Batch, Device, DeviceEvent, ProcessInfo, ReadError, Reading, Source
from .nvml import NVMLSource
from .simulated import SimulatedGPUs

SOURCE_CHOICES = "'auto', 'nvml', 'sim', 'prometheus=URL', a SimulatedGPUs or a source object"

__all__ = [
    "SOURCE_CHOICES",
    "Batch",
    "Device",
    "DeviceEvent",
    "NVMLSource",
    "ProcessInfo",
    "ReadError",
    "Reading",
    "SimulatedGPUs",
    "Source",
    "open_source",
    "resolve_source",
]


def resolve_source(source: object) -> Source:
    """Turn the ``source=`` argument into an unopened source object, or raise ValueError."""
    if isinstance(source, SimulatedGPUs):
        return NVMLSource(source)
    if isinstance(source, str):
        spec = source.strip()
        if spec in ("auto", "nvml"):
            return NVMLSource()
        if spec in ("sim", "simulated"):
            return NVMLSource(SimulatedGPUs())
        if spec.startswith("prometheus="):
            from .prometheus import PrometheusSource

            return PrometheusSource(spec.split("=", 1)[1])
        raise BadArgumentError(f"unknown source {source!r}; use {SOURCE_CHOICES}")
    if isinstance(source, Source):
        return source
    raise BadArgumentError(f"source must be {SOURCE_CHOICES}; got {type(source).__name__}")


def open_source(source: object) -> Source:
    """Resolve and open a source; NVML failures surface as NVMLUnavailableError."""
    src = resolve_source(source)
    src.open()
    return src
