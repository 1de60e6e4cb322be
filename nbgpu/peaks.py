"""The one memory peak: NVML's samples folded with PyTorch's allocator, for summaries and the OOM rule."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .units import finite

# The allocator's and NVML's peaks count as the same figure within this much.
PEAK_AGREE_FRACTION = 0.02
PEAK_AGREE_BYTES = 64 * 1024**2


@dataclass(frozen=True)
class Peak:
    """A memory peak in bytes (NaN: unknown) and where it came from."""

    bytes: float
    source: str  # "nvml" | "allocator" | "both" | "none"


def fold_peak(nvml_peak_bytes: float, nvml_at_bytes: float, allocator: Mapping | None) -> Peak:
    """NVML's peak raised to the allocator's ``peak_reserved_bytes`` plus what NVML counted outside
    it (``nvml_at_bytes`` less ``reserved_start_bytes``); ``allocator`` None: PyTorch not in use."""
    nvml = float(nvml_peak_bytes) if finite(nvml_peak_bytes) else math.nan
    if not allocator or not finite(allocator.get("peak_reserved_bytes", math.nan)):
        return Peak(nvml, "nvml" if math.isfinite(nvml) else "none")
    outside = (float(nvml_at_bytes) - float(allocator.get("reserved_start_bytes", 0.0))
               if finite(nvml_at_bytes) else 0.0)
    peak = float(allocator["peak_reserved_bytes"]) + max(outside, 0.0)
    if not math.isfinite(nvml):
        return Peak(peak, "allocator")
    agree = abs(peak - nvml) <= max(PEAK_AGREE_FRACTION * max(peak, nvml), PEAK_AGREE_BYTES)
    return Peak(max(peak, nvml), "both" if agree else ("allocator" if peak > nvml else "nvml"))


def torch_cuda() -> object | None:
    """``torch.cuda`` if the user's code imported torch and started CUDA, else None (never imports)."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    try:
        return cuda if cuda is not None and cuda.is_initialized() else None
    except Exception:
        return None


def torch_uuid(cuda: object, index: int) -> str:
    """The NVML-style UUID (``GPU-...``) of torch's device ``index``; "" when it cannot be told."""
    try:
        uuid = str(cuda.get_device_properties(index).uuid)
    except Exception:
        return ""
    return uuid if not uuid or uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def allocator_now(devices: Iterable[object]) -> dict[object, dict[str, float]]:
    """PyTorch's reserved peak and reserved memory now, per device key, for ``fold_peak``."""
    cuda = torch_cuda()
    if cuda is None:
        return {}
    try:
        figures = [{"peak_reserved_bytes": float(cuda.max_memory_reserved(i)),
                    "reserved_start_bytes": float(cuda.memory_reserved(i)),
                    "uuid": torch_uuid(cuda, i)} for i in range(cuda.device_count())]
    except Exception:
        return {}
    matched = match_torch(list(devices), figures, "uuid")
    return {key: {k: v for k, v in fig.items() if k != "uuid"} for key, fig in matched.items()}


def match_torch(devices: list, figures: list[dict], uuid_key: str) -> dict[object, dict]:
    """torch's per-device ``figures`` by device key: by UUID, else by order when no
    ``CUDA_VISIBLE_DEVICES`` renumbers them and the counts agree."""
    by_uuid = {f[uuid_key]: f for f in figures if f[uuid_key]}
    same_order = "CUDA_VISIBLE_DEVICES" not in os.environ and len(figures) == len(devices)
    out = {}
    for pos, dev in enumerate(devices):
        fig = by_uuid.get(getattr(dev, "uuid", "") or "") or (figures[pos] if same_order else None)
        if fig is not None:
            out[dev.key] = fig
    return out
