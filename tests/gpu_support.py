"""A way for the `gpu` tests to keep the first GPU busy (the `nvml` fixture is in conftest)."""

from __future__ import annotations

import time


def gpu_busy(seconds: float) -> None:
    """bf16 matrix products on the first GPU if torch with CUDA is here, else an idle wait."""
    try:
        import torch
    except ImportError:
        time.sleep(seconds)
        return
    if not torch.cuda.is_available():
        time.sleep(seconds)
        return
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
