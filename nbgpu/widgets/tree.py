"""Every widget a panel holds, layouts and styles included, so closing it leaks none.

ipywidgets creates a ``Layout`` and often a ``Style`` widget behind each widget, and bqplot
figures hold their marks, scales and layout; each stays in ipywidgets' instance registry
(and keeps its comm) until closed. Closing only the widgets a panel created by name
leaves about half of them behind, so the panel walks its synced traits instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from ipywidgets import Widget

_shared: set[int] = set()  # ids of widgets many panels use at once (kept alive by their owner)


def share(widget: Widget) -> Widget:
    """Mark ``widget`` as used by many panels: ``close_all`` never closes it. Returns it."""
    _shared.add(id(widget))
    return widget


def _widgets_in(value: object) -> Iterable[Widget]:
    if isinstance(value, Widget):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _widgets_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _widgets_in(item)


def descendants(root: Widget) -> list[Widget]:
    """``root`` and every widget reachable from its synced traits (children, layout, marks...)."""
    seen: dict[int, Widget] = {}
    stack = [root]
    while stack:
        w = stack.pop()
        if id(w) in seen:
            continue
        seen[id(w)] = w
        for name in w.keys:
            stack.extend(_widgets_in(getattr(w, name, None)))
    return list(seen.values())


def close_all(widgets: Iterable[Widget], keep: Iterable[Widget] = ()) -> int:
    """Close each widget not in ``keep`` nor shared; returns how many were closed."""
    kept = {id(w) for w in keep} | _shared
    n = 0
    for w in widgets:
        if id(w) not in kept and w.comm is not None:
            w.close()
            n += 1
    return n
