"""The panels of this kernel (for ``%gpumon stop``, ``%unload_ext``; stopped ones held weakly),
and every widget a panel holds (layouts, styles, marks, scales), so closing it leaks none."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable

from ipywidgets import Widget

_lock = threading.Lock()
_panels: dict = {}  # running panels, oldest first (an ordered set)
_stopped: weakref.WeakSet = weakref.WeakSet()
_shared: set[int] = set()  # ids of widgets many panels use at once (kept alive by their owner)


def add(panel) -> None:
    """Hold a panel that runs (or is about to)."""
    with _lock:
        _stopped.discard(panel)
        _panels.setdefault(panel, None)


def park(panel) -> None:
    """A panel stopped but still on screen: no longer held, still reachable while it lives."""
    with _lock:
        _panels.pop(panel, None)
        _stopped.add(panel)


def discard(panel) -> None:
    """Forget a closed panel."""
    with _lock:
        _panels.pop(panel, None)
        _stopped.discard(panel)


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
    old = [p for p in panels() + stopped() if p is not keep and getattr(p, "origin", None) == cell] \
        if cell is not None else []
    for p in old:
        p.close()
    return len(old)


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


def share(widget: Widget) -> Widget:
    """Mark ``widget`` as used by many panels: ``close_widgets`` never closes it. Returns it."""
    _shared.add(id(widget))
    return widget


def _widgets_in(value: object) -> Iterable[Widget]:
    if isinstance(value, Widget):
        yield value
    elif isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _widgets_in(item)


def descendants(root: Widget) -> list[Widget]:
    """``root`` and every widget reachable from its synced traits (children, layout, marks...)."""
    seen: dict[int, Widget] = {}
    stack = [root]
    while stack:
        w = stack.pop()
        if id(w) not in seen:
            seen[id(w)] = w
            for name in w.keys:
                stack.extend(_widgets_in(getattr(w, name, None)))
    return list(seen.values())


def close_widgets(widgets: Iterable[Widget], keep: Iterable[Widget] = ()) -> int:
    """Close each widget not in ``keep`` nor shared; returns how many were closed."""
    kept = {id(w) for w in keep} | _shared
    doomed = [w for w in widgets if id(w) not in kept and w.comm is not None]
    for w in doomed:
        w.close()
    return len(doomed)
