"""Views lower layers show, ``view(kind, obj)``: "cell_report" and "oom_report" import their widget
on first use, the two documented exceptions to the layer rule (docs/engine.md "Layers")."""

from __future__ import annotations

from collections.abc import Callable

_VIEWS: dict[str, Callable[[object], object]] = {}
_DEFAULTS = {"cell_report": "CellReport", "oom_report": "OomReport"}  # kind -> class in widgets/cell_report


def register_view(kind: str, factory: Callable[[object], object]) -> None:
    """Make ``view(kind, obj)`` return ``factory(obj)``; a later registration replaces it."""
    _VIEWS[kind] = factory


def default_view(kind: str) -> Callable[[object], object] | None:
    """nbgpu's own view for ``kind`` (its widget class, imported now), or None for other kinds."""
    if kind not in _DEFAULTS:
        return None
    from .widgets import cell_report

    return getattr(cell_report, _DEFAULTS[kind])


def view(kind: str, obj: object) -> object:
    """The view of ``obj`` for ``kind`` (registered, else nbgpu's default), or ``obj`` itself."""
    factory = _VIEWS.get(kind) or default_view(kind)
    return obj if factory is None else factory(obj)
