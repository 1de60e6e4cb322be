"""Find the live panel's refresh code and call it the way a displayed panel would."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PanelAPI:
    """Whether the panel can be driven here, why not, and how."""

    available: bool
    reason: str = ""
    cls: object = None

    def drive(self, sampler):
        raise RuntimeError(self.reason)


def find_panel() -> PanelAPI:
    """The panel class and its refresh method, or why they are unavailable."""
    try:
        from nbgpu.widgets import GPUMonitor  # noqa: F401
    except ImportError as exc:
        return PanelAPI(False, f"panel refresh path unavailable: {exc}")
    return PanelAPI(False, "panel refresh path unavailable: no refresh() to drive")
