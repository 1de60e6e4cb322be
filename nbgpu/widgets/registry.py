"""The panels alive in this kernel, so ``%gpumon stop`` and ``%unload_ext`` can reach them."""

from __future__ import annotations

import threading

_lock = threading.Lock()
_panels: list = []


def add(panel) -> None:
    with _lock:
        if panel not in _panels:
            _panels.append(panel)


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
    old = [p for p in panels() if p is not keep and getattr(p, "origin", None) == cell]
    for p in old:
        p.close()
    return len(old)


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
