"""The panels of this kernel, so ``%gpumon stop`` and ``%unload_ext`` can reach them.

Running panels are held here; a stopped panel (on screen, drawing nothing) is only looked up
weakly, so panels started and stopped over a long session do not pile up here, and a cell
run again can still close the one it showed.
"""

from __future__ import annotations

import threading
import weakref

_lock = threading.Lock()
_panels: list = []
_stopped: weakref.WeakSet = weakref.WeakSet()


def add(panel) -> None:
    """Hold a panel that runs (or is about to)."""
    with _lock:
        _stopped.discard(panel)
        if panel not in _panels:
            _panels.append(panel)


def park(panel) -> None:
    """A panel stopped but still on screen: no longer held, still reachable while it lives."""
    with _lock:
        if panel in _panels:
            _panels.remove(panel)
        _stopped.add(panel)


def current_cell() -> str | None:
    """Id of the notebook cell being run (JupyterLab and Notebook 7 send it), else None."""
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent("shell") if kernel is not None else None
        return (parent or {}).get("metadata", {}).get("cellId") or None
    except Exception:
        return None


def close_from_cell(cell: str | None, keep=None) -> int:
    """Close the panels an earlier run of ``cell`` opened (its output is gone); returns how many."""
    if cell is None:
        return 0
    old = [p for p in panels() + stopped() if p is not keep and getattr(p, "origin", None) == cell]
    for p in old:
        p.close()
    return len(old)


def discard(panel) -> None:
    """Forget a closed panel."""
    with _lock:
        if panel in _panels:
            _panels.remove(panel)
        _stopped.discard(panel)


def panels() -> list:
    """Panels started and not stopped or closed, oldest first."""
    with _lock:
        return list(_panels)


def stopped() -> list:
    """Stopped panels still on screen (those nothing else holds may be gone already)."""
    with _lock:
        return list(_stopped)


def stop_all() -> int:
    """Stop every running panel's updates (they stay on screen, marked stopped); returns how many."""
    items = panels()
    for p in items:
        p.stop()
    return len(items)


def close_all() -> int:
    """Stop and close every panel, stopped ones too (removes them from the page); returns how many."""
    items = panels() + stopped()
    for p in items:
        p.close()
    return len(items)
