"""What every source provides: devices, their streams, and new readings on request."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import BadArgumentError

DeviceKey = int | str  # a card (0), a MIG slice ("0/1"), a remote card ("node/3")


def check_gpus(gpus: object, cards: list[DeviceKey]) -> tuple[DeviceKey, ...] | None:
    """The cards ``gpus`` names ("0,2", 0 or a list), each one of ``cards``; None: all. The one
    check of a GPU selection: anything else is a ``BadArgumentError`` saying which GPUs there are."""
    if gpus is None:
        return None
    numbered = list(cards) == list(range(len(cards)))
    allowed = ("none (no GPUs)" if not cards else f"0 to {len(cards) - 1}" if numbered
               else ", ".join(map(str, cards)))
    if isinstance(gpus, bool) or not isinstance(gpus, (str, int, list, tuple, set, frozenset, range)):
        raise BadArgumentError(f"gpus must be a GPU index, \"0,2\" or a list of them, got {gpus!r}")
    items = gpus.split(",") if isinstance(gpus, str) else [gpus] if isinstance(gpus, int) else list(gpus)
    by_name = {str(c): c for c in cards}
    for item in items:
        if isinstance(item, bool) or str(item).strip() not in by_name:
            raise BadArgumentError(f"GPU index {str(item).strip()} is out of range; this machine has "
                                   f"{len(cards)} GPU(s): {allowed}")
    if not items:
        raise BadArgumentError(f"gpus is empty; choose from {allowed}")
    return tuple(dict.fromkeys(by_name[str(item).strip()] for item in items))


@dataclass(frozen=True)
class Device:
    """One GPU a source reports: a card, a MIG slice (``parent``: its card's key) or a remote card;
    ``metrics`` names what it reports; ``None`` in a number field means "not known here"."""

    key: DeviceKey
    name: str
    uuid: str = ""
    parent: DeviceKey | None = None
    mig: bool = False
    mem_total_bytes: int | None = None
    power_limit_w: float | None = None
    metrics: tuple[str, ...] = ()
    node: str | None = None
    slowdown_temp_c: float | None = None
    simulated: bool = False

    @property
    def card(self) -> DeviceKey:
        """Key of the physical card: the parent of a MIG slice, else the device itself."""
        return self.key if self.parent is None else self.parent

    @classmethod
    def of(cls, described: object) -> Device:
        """``described`` as a Device: itself, or one from a recorded file's mapping."""
        if isinstance(described, Device):
            return described
        get = described.get
        return cls(key=get("index", get("key")), name=str(get("name") or ""), uuid=str(get("uuid") or ""),
                   parent=get("parent"), mig=bool(get("mig", get("parent") is not None)),
                   node=get("host", get("node")))


@dataclass(frozen=True)
class ProcessInfo:
    """A process holding GPU memory, as NVML lists it (a host PID); None where not known here."""

    pid: int
    used_bytes: int | None
    name: str | None = None
    user: str | None = None


@dataclass
class Batch:
    """Readings for one (device, stream): arrays of rows, or one row (``times`` a float)."""

    device: object
    stream: str
    times: np.ndarray | float
    values: dict[str, np.ndarray] | dict[str, float]

    @property
    def one_row(self) -> bool:
        """Whether this is one row of floats (``times`` a float)."""
        return not isinstance(self.times, np.ndarray)


@dataclass
class DeviceEvent:
    """A state change of a device: "lost", "recovered", "error", "unsupported" (``metrics`` are
    gone mid-run) or "xid" (a GPU fault; ``code`` is its XID number)."""

    device: object
    kind: str
    message: str
    metrics: tuple[str, ...] = ()
    code: int | None = None


@dataclass(frozen=True)
class ReadError:
    """A read that failed this time (a transient error): which device, which read, why."""

    device: object
    read: str
    message: str
    metrics: tuple[str, ...] = ()  # what the read gives; empty: not known (the whole device)


@dataclass
class Reading:
    """Everything a source produced in one call to ``read``; ``errors`` failed transiently."""

    batches: list[Batch] = field(default_factory=list)
    events: list[DeviceEvent] = field(default_factory=list)
    errors: list[ReadError] = field(default_factory=list)


@runtime_checkable
class Source(Protocol):
    """A place readings come from. ``open`` may raise; ``read`` must not. ``due`` holds "tick",
    "memory" (memory used only), "energy", "pcie", "procs", "edge" (drain every buffer now) and
    "live" (someone watches). Optional: ``select(keys)``, ``processes()``, ``simulated_host(t)``."""

    kind: str
    simulated: bool

    def open(self) -> None: ...

    def close(self) -> None: ...

    def devices(self) -> list[Device]: ...

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]: ...

    def read(self, now: float, due: frozenset[str]) -> Reading: ...

    def describe(self) -> str: ...


class HostOnlySource:
    """No devices, no readings; ``reason`` says why there are no GPUs (the NVML error)."""

    kind = "none"
    simulated = False

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def devices(self) -> list[dict]:
        return []

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]:
        return {}

    def read(self, now: float, due: frozenset[str]) -> Reading:
        return Reading()

    def describe(self) -> str:
        """Why no GPU is visible: views read it from the sampler's status."""
        return self.reason
