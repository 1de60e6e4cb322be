"""What every source provides: devices, their streams, and new readings on request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np


@dataclass
class Batch:
    """Readings for one (device, stream): one row (``values`` of floats) or many (arrays)."""

    device: object
    stream: str
    times: np.ndarray
    values: dict[str, np.ndarray]


@dataclass
class DeviceEvent:
    """A state change of a device, such as a GPU falling off the bus."""

    device: object
    kind: str  # "lost", "recovered", "error"
    message: str


@dataclass
class Reading:
    """Everything a source produced in one call to ``read``."""

    batches: list[Batch] = field(default_factory=list)
    events: list[DeviceEvent] = field(default_factory=list)


@runtime_checkable
class Source(Protocol):
    """A place readings come from. ``open`` may raise; ``read`` must not.

    ``read(now, due)``: "tick" in ``due`` asks for the cheap per-tick reads; "energy",
    "pcie", "procs" for the costly ones. Optional methods a source may add:
    ``select(keys)`` (read only those devices) and ``simulated_host(t)`` (host readings a
    simulated scenario implies).
    """

    kind: str
    simulated: bool

    def open(self) -> None: ...

    def close(self) -> None: ...

    def devices(self) -> list[dict]: ...

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]: ...

    def read(self, now: float, due: frozenset[str]) -> Reading: ...

    def describe(self) -> str: ...
