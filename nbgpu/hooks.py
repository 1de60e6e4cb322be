"""Views lower layers show, ``view(kind, obj)``: "cell_report" and "oom_report" import their widget
on first use, the two documented exceptions to the layer rule (docs/engine.md "Layers")."""

from __future__ import annotations

from collections.abc import Callable

_VIEWS: dict[str, Callable[[object], object]] = {}


def register_view(kind: str, factory: Callable[[object], object]) -> None:
    """Make ``view(kind, obj)`` return ``factory(obj)``; a later registration replaces it."""
    _VIEWS[kind] = factory


def default_view(kind: str) -> Callable[[object], object] | None:
    """nbgpu's own view for ``kind`` (its widget class, imported now), or None for other kinds."""
    if kind == "cell_report":
        from .widgets.cell_report import CellReport

        return CellReport
    if kind == "oom_report":
        from .widgets.cell_report import OomReport

        return OomReport
    return None


def view(kind: str, obj: object) -> object:
    """The view of ``obj`` for ``kind`` (registered, else nbgpu's default), or ``obj`` itself."""
    factory = _VIEWS.get(kind) or default_view(kind)
    return obj if factory is None else factory(obj)
