"""What PyTorch and TensorFlow say about their GPU memory, asked only once the kernel started CUDA
through them (nbgpu never imports either and never starts CUDA)."""

from __future__ import annotations

import os
import sys

from ..peaks import torch_cuda, torch_uuid
from ..sources.base import Device


def torch_memory() -> list[dict]:
    """Per CUDA device of torch: allocated and reserved bytes and the device's UUID, if known."""
    if (cuda := torch_cuda()) is None:
        return []
    try:
        return [{"framework": "torch", "device": f"cuda:{i}", "index": i, "uuid": torch_uuid(cuda, i),
                 "allocated_bytes": float(cuda.memory_allocated(i)),
                 "reserved_bytes": float(cuda.memory_reserved(i))} for i in range(cuda.device_count())]
    except Exception:
        return []


def tensorflow_memory() -> list[dict]:
    """Per GPU of TensorFlow's running context: ``get_memory_info`` current and peak bytes."""
    tf = sys.modules.get("tensorflow")
    eager = sys.modules.get("tensorflow.python.eager.context")
    if tf is None or eager is None:
        return []
    try:
        if not getattr(eager.context(), "_initialized", False):  # asking would start it
            return []
        count = len(tf.config.list_physical_devices("GPU"))
    except Exception:
        return []
    out = []
    for i in range(count):
        try:
            info = tf.config.experimental.get_memory_info(f"GPU:{i}")
        except Exception:
            continue
        out.append({"framework": "tensorflow", "device": f"GPU:{i}", "index": i, "uuid": "",
                    "allocated_bytes": float(info.get("current", 0)),
                    "peak_bytes": float(info.get("peak", 0))})
    return out


def nvml_index_of(entry: dict, devices: list[Device]) -> object:
    """The NVML GPU key a framework device is, by UUID, else by CUDA_VISIBLE_DEVICES, else index."""
    uuid = entry.get("uuid", "").lower().removeprefix("gpu-")
    same = [d.key for d in devices if uuid and d.uuid.lower().removeprefix("gpu-") == uuid]
    if same:
        return same[0]
    if visible := os.environ.get("CUDA_VISIBLE_DEVICES"):
        parts = [p.strip() for p in visible.split(",") if p.strip()]
        if entry["index"] < len(parts) and parts[entry["index"]].isdigit():
            return int(parts[entry["index"]])
        return None
    return entry["index"]
