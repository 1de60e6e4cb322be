"""GPU profiles of code: cells (``%%gpumon``, ``%gpumon --cells``), blocks, loops and marks."""

from __future__ import annotations

from .capture import Capture, capture
from .history import history
from .marks import Tracker, mark, track

__all__ = ["Capture", "Tracker", "capture", "history", "mark", "track"]
