"""Views that lower layers show without importing them: the layer that draws registers here.

``profiles`` makes a ``Capture``, but the widget that draws its report lives in ``widgets``,
a layer above; ``nbgpu/__init__`` registers that widget as the ``"cell_report"`` view, and
``Capture.report()`` and cell mode ask for the view by name. Data still flows one way.
"""

from __future__ import annotations

from collections.abc import Callable

_VIEWS: dict[str, Callable[[object], object]] = {}


def register_view(kind: str, factory: Callable[[object], object]) -> None:
    """Make ``view(kind, obj)`` return ``factory(obj)``; a later registration replaces it."""
    _VIEWS[kind] = factory


def view(kind: str, obj: object) -> object:
    """The registered view of ``obj`` for ``kind``, or ``obj`` itself (its own repr) when none is."""
    factory = _VIEWS.get(kind)
    return obj if factory is None else factory(obj)
