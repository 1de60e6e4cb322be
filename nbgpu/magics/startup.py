"""Start-up stamps of ``%load_ext nbgpu`` and ``%gpumon``: where the wait for the panel goes.

Each phase is one ``time.time()`` (epoch seconds, so a client on the same machine can set
them against the moment it sent the cell). The ``first_panel_update`` benchmark reads
``stamps()`` from the kernel and writes the breakdown beside its figure; a stamp costs
about a microsecond, and only the last ``MAX_STAMPS`` are kept.
"""

from __future__ import annotations

import threading
import time

MAX_STAMPS = 64

_lock = threading.Lock()
_stamps: list[tuple[str, float]] = []


def stamp(phase: str) -> None:
    """Note that ``phase`` ended now (safe from any thread)."""
    with _lock:
        _stamps.append((phase, time.time()))
        del _stamps[:-MAX_STAMPS]


def stamps() -> list[tuple[str, float]]:
    """The phases noted so far, oldest first, as (name, epoch seconds)."""
    with _lock:
        return list(_stamps)


def clear() -> None:
    """Forget the stamps (``%load_ext`` starts a fresh record)."""
    with _lock:
        _stamps.clear()
