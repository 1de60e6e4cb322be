"""A source with no GPUs, so the panel still shows host CPU and RAM when NVML is missing."""

from __future__ import annotations

import numpy as np

from ..sources.base import Reading


class HostOnlySource:
    """No devices, no readings; ``reason`` says why there are no GPUs (the NVML error)."""

    kind = "none"
    simulated = False

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def open(self) -> None:
        """Nothing to open."""

    def close(self) -> None:
        """Nothing to release."""

    def devices(self) -> list[dict]:
        return []

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]:
        return {}

    def read(self, now: float, due: frozenset[str]) -> Reading:
        return Reading()

    def describe(self) -> str:
        return "no GPU visible"
