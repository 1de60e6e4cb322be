"""The live panel (ipywidgets + bqplot); imported only when a panel is asked for."""

from .monitor import GPUMonitor

__all__ = ["GPUMonitor"]
