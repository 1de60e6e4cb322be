"""PyTorch allocator figures of a captured block, read only if the user's code imported torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..peaks import torch_cuda, torch_uuid

if TYPE_CHECKING:
    from .capture import Capture


class TorchStats:
    """PyTorch allocator figures of a block, read only if the user's code imported torch."""

    def __init__(self) -> None:
        self.floor: dict[int, dict[str, float]] = {}
        self.reserved_start: dict[int, float] = {}
        self.result: dict[int, dict[str, float]] = {}

    def start(self, outer: list[Capture]) -> None:
        cuda = torch_cuda()
        if cuda is None:
            return
        for i in range(cuda.device_count()):
            peaks = {"allocated": float(cuda.max_memory_allocated(i)),
                     "reserved": float(cuda.max_memory_reserved(i))}
            for cap in outer:  # resetting the counters must not lose an outer block's peaks
                floor = cap._torch.floor.setdefault(i, {})
                for k, v in peaks.items():
                    floor[k] = max(floor.get(k, 0.0), v)
            self.reserved_start[i] = float(cuda.memory_reserved(i))
            cuda.reset_peak_memory_stats(i)

    def finish(self) -> None:
        cuda = torch_cuda()
        if cuda is None:
            return
        for i in range(cuda.device_count()):
            floor = self.floor.get(i, {})
            self.result[i] = {
                "torch_peak_allocated_bytes": max(float(cuda.max_memory_allocated(i)),
                                                  floor.get("allocated", 0.0)),
                "torch_peak_reserved_bytes": max(float(cuda.max_memory_reserved(i)),
                                                 floor.get("reserved", 0.0)),
                "torch_allocated_end_bytes": float(cuda.memory_allocated(i)),
                "torch_reserved_end_bytes": float(cuda.memory_reserved(i)),
                "torch_reserved_start_bytes": self.reserved_start.get(i, 0.0),
                "torch_uuid": torch_uuid(cuda, i),
            }
