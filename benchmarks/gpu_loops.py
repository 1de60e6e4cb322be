"""Training-loop stand-ins: a launch-bound loop (many tiny kernels) and a compute-bound one
(large bf16 matmuls), run for a fixed number of steps between two device synchronisations;
and a CPU-only stand-in for the launch-bound loop (small numpy ops), for machines without a GPU."""

from __future__ import annotations

import time


def _sync(torch, devices: list) -> None:
    for d in devices:
        if d.type == "cuda":
            torch.cuda.synchronize(d)


class Loop:
    """A workload on one or more devices; ``step()`` queues one step's kernels on each."""

    name = "loop"
    about = ""

    def __init__(self, devices: list[str]) -> None:
        import torch

        self.torch = torch
        self.devices = [torch.device(d) for d in devices]

    def step(self) -> None:
        raise NotImplementedError

    def calibrate(self, seconds: float) -> int:
        """How many steps take about ``seconds`` (at least 5); also warms up the kernels."""
        n, elapsed = 2, 0.0
        while True:
            elapsed = self.timed(n)
            if elapsed >= 0.2 or n >= 1_000_000:
                break
            n *= 4
        return max(5, int(n * seconds / elapsed))

    def sync(self) -> None:
        """Wait until every queued step has run on every device."""
        _sync(self.torch, self.devices)

    def timed(self, steps: int) -> float:
        """Wall seconds for ``steps`` steps, synchronised before and after."""
        _sync(self.torch, self.devices)
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        _sync(self.torch, self.devices)
        return time.perf_counter() - t0


class LaunchBound(Loop):
    """64 element-wise kernels per device per step on a 4096-element tensor: CPU launch-bound."""

    name = "launch_bound"
    about = "64 in-place element-wise kernels per step on a 4096-element float32 tensor"

    def __init__(self, devices: list[str]) -> None:
        super().__init__(devices)
        self.xs = [self.torch.ones(4096, device=d) for d in self.devices]

    def step(self) -> None:
        for x in self.xs:
            for _ in range(32):
                x.mul_(0.999).add_(0.001)


class ComputeBound(Loop):
    """Four 8192×8192 bf16 matmuls per device per step: GPU compute-bound."""

    name = "compute_bound"
    about = "4 bf16 matmuls of 8192x8192 per step"

    def __init__(self, devices: list[str], size: int = 8192) -> None:
        super().__init__(devices)
        torch = self.torch
        dtype = torch.bfloat16 if all(d.type == "cuda" for d in self.devices) else torch.float32
        self.mats = []
        for d in self.devices:
            g = torch.Generator(device=d).manual_seed(0)
            a = torch.randn(size, size, device=d, dtype=dtype, generator=g)
            b = torch.randn(size, size, device=d, dtype=dtype, generator=g)
            self.mats.append((a, b, torch.empty(size, size, device=d, dtype=dtype)))

    def step(self) -> None:
        for a, b, c in self.mats:
            for _ in range(4):
                self.torch.matmul(a, b, out=c)


class CpuSmallOps(Loop):
    """256 in-place numpy ops per step on a 4096-element float32 array: the launch-bound loop's CPU stand-in.

    Like the launch-bound loop it is a Python loop of short native calls that release the
    GIL; it needs neither torch nor a GPU.
    """

    name = "cpu_small_ops"
    about = "256 in-place numpy element-wise ops per step on a 4096-element float32 array"

    def __init__(self, devices: list[str] | None = None) -> None:
        import numpy as np

        self.torch, self.devices = None, []
        self.x = np.ones(4096, dtype=np.float32)

    def step(self) -> None:
        x = self.x
        for _ in range(128):
            x *= 0.999
            x += 0.001
