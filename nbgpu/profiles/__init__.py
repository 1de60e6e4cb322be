"""GPU profiles of code: cells (``%%gpumon``, ``%gpumon --cells``), blocks, loops and marks."""

from __future__ import annotations

from . import callbacks
from .capture import Capture, capture
from .marks import Tracker, mark, track

__all__ = ["Capture", "Tracker", "callbacks", "capture", "mark", "track"]
