"""nbgpu: see what your NVIDIA GPUs are doing, live, from inside a Jupyter notebook.

``%load_ext nbgpu`` then ``%gpumon`` in a notebook; from Python, ``nbgpu.Sampler``.
Nothing starts at import: no thread, no NVML call, no widget.
"""

from __future__ import annotations

import logging

from .diagnostics import Alert, Thresholds
from .errors import BadArgumentError, NbgpuError, NVMLUnavailableError, SourceError
from .profiles import capture, mark, track
from .profiles.history import history
from .sampler import Sampler
from .sources.simulated import SimulatedGPUs
from .timeline import Timeline

logging.getLogger("nbgpu").addHandler(logging.NullHandler())

__version__ = "0.1.0"

__all__ = [
    "Alert",
    "BadArgumentError",
    "GPUMonitor",
    "NVMLUnavailableError",
    "NbgpuError",
    "Sampler",
    "SimulatedGPUs",
    "SourceError",
    "Thresholds",
    "Timeline",
    "__version__",
    "capture",
    "history",
    "load_ipython_extension",
    "mark",
    "track",
    "unload_ipython_extension",
]


def __getattr__(name: str):
    """``nbgpu.GPUMonitor`` imports ipywidgets and bqplot only when first asked for."""
    if name == "GPUMonitor":
        from .widgets.monitor import GPUMonitor

        return GPUMonitor
    raise AttributeError(f"module 'nbgpu' has no attribute {name!r}")


def load_ipython_extension(ipython) -> None:
    """``%load_ext nbgpu``: register the magics and say which GPUs are visible."""
    from .magics.extension import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    """``%unload_ext nbgpu``: stop the kernel's sampler and panels, remove the magics."""
    from .magics.extension import unload

    unload(ipython)
