"""Where readings come from: NVML (real or simulated), the host, Prometheus."""

from __future__ import annotations

from ..errors import BadArgumentError
from .base import Source
from .nvml import NVMLSource
from .simulated import WARM_S, SimulatedGPUs

SOURCE_CHOICES = ("'auto', 'nvml', 'sim', 'sim:N', 'prometheus=URL', a SimulatedGPUs "
                  "or a source object")
SIM_MAX = 64


def sim_count(spec: str) -> int | None:
    """The number of GPUs ``spec`` simulates ("sim": 2, "sim:8": 8, 1 to 64); None if not simulated."""
    head, sep, count = spec.strip().partition(":")
    if head not in ("sim", "simulated"):
        return None
    if sep and not (count.isascii() and count.isdigit() and 1 <= int(count) <= SIM_MAX):
        raise BadArgumentError(f"sim:N takes a whole number of GPUs from 1 to {SIM_MAX}, got {spec!r}")
    return int(count) if sep else 2


def resolve_source(source: object) -> Source:
    """Turn the ``source=`` argument into an unopened source object, or raise ValueError."""
    if isinstance(source, SimulatedGPUs):
        return NVMLSource(source)
    if isinstance(source, str):
        spec = source.strip()
        if spec in ("auto", "nvml"):
            return NVMLSource()
        if (count := sim_count(spec)) is not None:
            return NVMLSource(SimulatedGPUs(count=count, warm_s=WARM_S, model_process=False))
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
