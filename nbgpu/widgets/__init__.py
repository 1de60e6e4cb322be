"""The live panel (ipywidgets + bqplot); its modules import those only when a panel is asked for."""

from __future__ import annotations

__all__ = ["GPUMonitor"]


def __getattr__(name: str):
    if name == "GPUMonitor":
        from .monitor import GPUMonitor

        return GPUMonitor
    raise AttributeError(f"module 'nbgpu.widgets' has no attribute {name!r}")
