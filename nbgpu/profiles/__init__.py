"""GPU profiles of code: cells (``%%gpumon``, ``%gpumon --cells``), blocks, loops and marks.

``nbgpu.history`` (the function) lives in ``nbgpu.profiles.history`` (the module, which
also holds the records: ``records()``, ``clear()``).
"""

from __future__ import annotations

from .capture import Capture, capture
from .marks import Tracker, mark, track

__all__ = ["Capture", "Tracker", "capture", "mark", "track"]
