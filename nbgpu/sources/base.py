"""What every source provides: devices, their streams, and new readings on request."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

DeviceKey = int | str  # a card (0), a MIG slice ("0/1"), a remote card ("node/3")

# Old dict keys of a device and the field each one now is (the transitional mapping).
_OLD_KEYS = {"index": "key", "host": "node"}
_FLOAT_OR_NAN = ("mem_total_bytes", "power_limit_w", "slowdown_temp_c")


@dataclass(frozen=True)
class Device:
    """One GPU a source reports: a card, a MIG slice of a card, or a card on a Prometheus node.

    ``key`` is an int for a local card, "0/1" for slice 1 of card 0, "node/3" for a remote
    card; ``parent`` is the key of the card a MIG slice belongs to (None for a card).
    ``metrics`` names what it reports; ``None`` in a number field means "not known here".

    Backwards compatibility for user code written when ``Sampler.devices`` held dicts:
    ``d["index"]``, ``d.get("mig")`` and ``dict(d)`` still work (old keys map to fields,
    unknown numbers read as NaN as before). nbgpu itself reads attributes only.
    """

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
        """``described`` as a Device: itself, or one built from an old-style mapping.

        Recorded files and old user code describe devices as dicts (``index``, ``name``,
        ``uuid``, ``parent``, ``mig``, ``host``); unknown keys are ignored.
        """
        if isinstance(described, Device):
            return described
        get = described.get
        parent = get("parent")
        return cls(key=get("index", get("key")), name=str(get("name") or ""),
                   uuid=str(get("uuid") or ""), parent=parent,
                   mig=bool(get("mig", parent is not None)), node=get("host", get("node")))

    def __getitem__(self, old_key: str):
        """Old dict-style read (kept for user code): ``d["index"]`` is ``d.key``; missing numbers are NaN."""
        name = _OLD_KEYS.get(old_key, old_key)
        if name not in self.__dataclass_fields__:
            raise KeyError(old_key)
        value = getattr(self, name)
        if name in _FLOAT_OR_NAN:
            return math.nan if value is None else float(value)
        if name == "metrics":
            return list(value)
        return value

    def get(self, old_key: str, default=None):
        """Old ``dict.get`` (kept for user code): the value of an old key or field, else ``default``."""
        try:
            return self[old_key]
        except KeyError:
            return default

    def __contains__(self, old_key: object) -> bool:
        return isinstance(old_key, str) and (
            _OLD_KEYS.get(old_key, old_key) in self.__dataclass_fields__)

    def keys(self) -> list[str]:
        """The old dict keys, so ``dict(device)`` still gives the old mapping."""
        return ["index", *(n for n in self.__dataclass_fields__ if n != "key")]


@dataclass(frozen=True)
class ProcessInfo:
    """A process holding memory on a GPU, as NVML lists it.

    ``pid`` is the PID NVML reports (a host PID: inside a container's PID namespace it may
    not be a process visible here); ``used_bytes`` is None where NVML does not say;
    ``name`` and ``user`` are None where the PID is not visible in this PID namespace.
    """

    pid: int
    used_bytes: int | None
    name: str | None = None
    user: str | None = None


@dataclass
class Batch:
    """Readings for one (device, stream): many rows (``times`` and ``values`` arrays), or one
    row (``times`` a float, ``values`` floats: a tick's reads, written with no array made)."""

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
    """A state change of a device: "lost", "recovered", "error", "unsupported" or "xid".

    "unsupported" means the metrics in ``metrics`` stopped being reported mid-run (NVML now
    answers NotSupported): they are gone, not frozen at their last value. "xid" is a GPU
    fault NVML reported; ``code`` is its XID number.
    """

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
    """A place readings come from. ``open`` may raise; ``read`` must not.

    ``read(now, due)``: "tick" in ``due`` asks for the cheap per-tick reads; "memory" for
    memory used only (cheap, asked often while a profile holds ``fast_memory``); "energy",
    "pcie", "procs" for the costly ones; "edge" for memory used and every sample buffer
    drained now (a capture's end); "live" while someone watches the newest values, so
    buffers are drained often enough for a live view. Optional methods a source may add:
    ``select(keys)`` (read only those devices), ``processes()`` (a snapshot
    ``{key: [ProcessInfo]}``) and ``simulated_host(t)`` (host readings a simulated
    scenario implies).
    """

    kind: str
    simulated: bool

    def open(self) -> None: ...

    def close(self) -> None: ...

    def devices(self) -> list[Device]: ...

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]: ...

    def read(self, now: float, due: frozenset[str]) -> Reading: ...

    def describe(self) -> str: ...
