"""GPU profiles of code: cells (``%%gpumon``, ``%gpumon --cells``), blocks, loops and marks."""

from __future__ import annotations

from .capture import Capture, capture
from .marks import Tracker, mark, track

__all__ = ["Capture", "Tracker", "capture", "mark", "track"]


def __getattr__(name: str) -> object:
    """Import a submodule on first access, so ``nbgpu.profiles.callbacks.keras_callback`` works."""
    import importlib
    import importlib.util

    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
