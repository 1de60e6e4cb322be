"""NVML's critical XID events: one event set for every card, polled each tick with a 0 ms wait;
each becomes a "xid" ``DeviceEvent``. Where registering is refused there are none (logged once)."""

from __future__ import annotations

import contextlib
import logging

from .base import DeviceEvent
from .nvml_gateway import NVMLCallError, NVMLGateway

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
ERR_TIMEOUT = 10  # NVML_ERROR_TIMEOUT: no event pending
MAX_PER_POLL = 64  # a storm of events is read over several ticks, never in one long loop

# What an XID code means, after NVIDIA's XID catalogue (the commonest ones).
MEANINGS = {
    8: "GPU stopped processing (driver timeout)", 31: "GPU memory page fault (MMU fault)",
    13: "graphics engine exception (often an illegal access in a kernel)",
    32: "invalid or corrupted push buffer stream", 38: "driver firmware error",
    43: "GPU stopped processing (a context was reset)", 45: "preemptive cleanup, after earlier errors",
    48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
    62: "internal micro-controller halt", 63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed", 69: "graphics engine class error",
    74: "NVLink error", 79: "GPU has fallen off the bus", 92: "high single-bit ECC error rate",
    94: "contained ECC error (the application was stopped)", 109: "context switch timeout",
    95: "uncontained ECC error (the GPU needs a reset)", 119: "GSP RPC timeout", 120: "GSP error",
    121: "C2C link error", 140: "unrecovered ECC error",
}


def meaning(code: int) -> str:
    """What XID ``code`` means, in a few words."""
    return MEANINGS.get(int(code), "see NVIDIA's XID catalogue")


def describe(gpu: object, code: int) -> str:
    """One line: ``GPU 0 reported XID 79: GPU has fallen off the bus``."""
    return f"GPU {gpu} reported XID {int(code)}: {meaning(code)}"


def decode(data: object) -> int | None:
    """The XID code of one ``nvmlEventSetWait`` answer (a ``c_nvmlEventData_t``); None if not an XID."""
    return int(data.eventData) if int(getattr(data, "eventType", 0)) & XID_EVENT else None


class XidWatch:
    """One event set registered for XIDs on ``cards`` (``_Device``s with ``handle`` and ``info``)."""

    def __init__(self, gw: NVMLGateway, cards: list) -> None:
        self._gw = gw
        self._by_uuid: dict[str, object] = {}
        self.events_set = None
        try:
            self.events_set = gw.call("nvmlEventSetCreate")
        except NVMLCallError as exc:
            gw.log_once(logging.INFO, ("xid",), f"no XID events: nvmlEventSetCreate: {exc.text}")
            return
        for dev in cards:
            try:
                gw.call("nvmlDeviceRegisterEvents", dev.handle, XID_EVENT, self.events_set)
            except NVMLCallError as exc:
                gw.log_once(logging.INFO, ("xid", dev.key), f"no XID events from GPU {dev.key}: {exc.text}")
                continue
            self._by_uuid[dev.info.get("uuid", "")] = dev.key
        if not self._by_uuid:
            self.free()

    @property
    def watching(self) -> list:
        """Keys of the cards whose XIDs are watched."""
        return list(self._by_uuid.values()) if self.events_set is not None else []

    def poll(self) -> list[DeviceEvent]:
        """The XID events pending now (none waits: a 0 ms timeout)."""
        out: list[DeviceEvent] = []
        while self.events_set is not None and len(out) < MAX_PER_POLL:
            try:
                data = self._gw.call("nvmlEventSetWait", self.events_set, 0)
            except NVMLCallError as exc:
                if exc.code != ERR_TIMEOUT:
                    self._gw.log_once(logging.WARNING, ("xid", "wait", exc.code),
                                      f"reading XID events failed: {exc.text}")
                break
            if (code := decode(data)) is not None:
                key = self._key(data)
                out.append(DeviceEvent(key, "xid", describe(key, code), code=code))
        return out

    def _key(self, data: object) -> object:
        if len(self._by_uuid) == 1:  # no UUID call, which fails on a GPU fallen off the bus
            return next(iter(self._by_uuid.values()))
        try:
            uuid = self._gw.call("nvmlDeviceGetUUID", data.device)
        except NVMLCallError:
            return None
        return self._by_uuid.get(uuid.decode() if isinstance(uuid, bytes) else str(uuid))

    def free(self) -> None:
        """Free the event set (before NVML's shutdown); nothing more is polled."""
        if self.events_set is not None:
            with contextlib.suppress(NVMLCallError):
                self._gw.call("nvmlEventSetFree", self.events_set)
        self.events_set = None
