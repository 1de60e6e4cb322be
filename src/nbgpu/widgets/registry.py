"""The panels alive in this kernel, so ``%gpumon stop`` and ``%unload_ext`` can reach them."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_panels: list = []


def add(panel) -> None:
    with _lock:
        if panel not in _panels:
            _panels.append(panel)


def discard(panel) -> None:
    with _lock:
        if panel in _panels:
            _panels.remove(panel)


def panels() -> list:
    """Panels not yet closed, oldest first."""
    with _lock:
        return list(_panels)


def stop_all() -> int:
    """Stop every panel's updates (they stay on screen, marked stopped); returns how many."""
    items = panels()
    for p in items:
        p.stop()
    return len(items)


def close_all() -> int:
    """Stop and close every panel (removes them from the page); returns how many."""
    items = panels()
    for p in items:
        p.close()
    return len(items)
