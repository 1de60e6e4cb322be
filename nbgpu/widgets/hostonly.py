"""A source with no GPUs, so the panel still shows host CPU and RAM when NVML is missing."""

from __future__ import annotations

import numpy as np

from .. import session
from ..errors import NVMLUnavailableError
from ..sources.base import Reading


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


def shared_or_host_only(source: object, interval: float | None):
    """The kernel's shared sampler; "auto" without NVML becomes a host-only sampler."""
    try:
        return session.ensure_sampler(source, interval)
    except NVMLUnavailableError as exc:
        if source not in (None, "auto"):
            raise
        return session.ensure_sampler(HostOnlySource(str(exc)), interval)


def plain_reason(reason: str) -> str:
    """The NVML error without its Python-API hint (the magics give their own hint)."""
    return reason.split("; or use source='sim'")[0].rstrip(".") + "."
