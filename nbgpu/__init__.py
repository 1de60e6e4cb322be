"""nbgpu: see what your NVIDIA GPUs are doing, live, in Jupyter (``%load_ext nbgpu``, ``%gpumon``).
Nothing starts at import; public names load their modules on first use, so importing is cheap."""

from __future__ import annotations

import importlib
import importlib.util
import logging

from .version import __version__ as __version__

# Public name -> module that defines it, imported on first access.
_LAZY = {name: module for module, names in {
    ".errors": ("BadArgumentError", "FileError", "NbgpuError", "NVMLUnavailableError", "SamplerStateError",
                "SourceError"),
    ".diagnostics": ("Alert", "Thresholds"), ".profiles": ("Capture", "capture", "mark", "track"),
    ".profiles.history": ("history", "keep_history"), ".holders": ("memory_by_name",),
    ".profiles.cost": ("configure",), ".profiles.oom": ("snapshot_on_alert",), ".sampler": ("Sampler",),
    ".sources.simulated": ("SimulatedGPUs",), ".timeline": ("Timeline",), ".widgets.monitor": ("GPUMonitor",),
}.items() for name in names}

logging.getLogger("nbgpu").addHandler(logging.NullHandler())

__all__ = sorted(["__version__", "load_ipython_extension", "unload_ipython_extension", *_LAZY])


def __getattr__(name: str) -> object:
    """Import a public name's module, or a submodule (``nbgpu.exporter.serve``), on first access."""
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'nbgpu' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython) -> None:
    """``%load_ext nbgpu``: register the magics and say which GPUs are visible."""
    from .magics.extension import load

    load(ipython)


def unload_ipython_extension(ipython) -> None:
    """``%unload_ext nbgpu``: stop the kernel's sampler and panels, remove the magics."""
    from .magics.extension import unload

    unload(ipython)
