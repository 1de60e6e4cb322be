"""Load the IPython extension (register the magics, say which GPUs are visible) and unload it,
leaving no thread or panel running."""

from __future__ import annotations

from .. import session
from ..errors import NbgpuError
from ..version import __version__


def load_message() -> str:
    """One line: how many GPUs, their names and the driver, or why none are visible (listed once,
    not probed, and kept for the sampler ``%gpumon`` starts)."""
    from ..sources.base import HostOnlySource
    from ..widgets.columns import plain_reason

    shared = session.shared_sampler()
    try:
        src = shared.source if shared is not None and shared.running and \
            not isinstance(shared.source, HostOnlySource) else session.listed_source("auto")
    except NbgpuError as exc:
        return (f"nbgpu {__version__}: no GPU visible: {plain_reason(str(exc))} "
                "Try %gpumon --source sim for simulated GPUs.")
    return f"nbgpu {__version__}: {src.describe()}. %gpumon shows the live panel."


def load(ipython) -> None:
    """Register ``%gpumon``/``%%gpumon`` and ``%config NbGpu``; print the one-line GPU summary."""
    from .. import config, flight
    from .gpumon import GPUMonMagics

    cfg = config.register(ipython)  # %config NbGpu.* now reaches nbgpu's defaults
    ipython.register_magics(GPUMonMagics)
    print(load_message())
    flight.on_load(ipython)
    cfg.observe(_cells_setting, "cells")  # %config NbGpu.cells = 'on' / 'off' acts at once
    if cfg.cells == "on":
        _cells_setting({"new": "on"})


def _cells_setting(change) -> None:
    """``NbGpu.cells``: profile every cell ('on'), as ``%gpumon --cells`` does, or stop ('off');
    nothing when the mode already is so (the magics set the setting after acting)."""
    from IPython import get_ipython

    from ..profiles.cells import cell_mode_enabled, disable_cell_mode, enable_cell_mode
    from ..widgets.columns import shared_or_host_only

    shell = get_ipython()
    on = change["new"] == "on"
    if shell is None or on == cell_mode_enabled():
        return
    if on:
        enable_cell_mode(shell, lambda: shared_or_host_only(None, None))
        print("nbgpu: profiling every cell (NbGpu.cells); nbgpu.history() lists them.")
    else:
        disable_cell_mode(shell)


def unload(ipython) -> None:
    """Stop panels, cell profiling and the sampler; remove the magics."""
    from .. import config, flight
    from ..profiles.cells import disable_cell_mode
    from ..widgets import registry

    for panel in registry.panels() + registry.stopped():
        panel.stop()
        registry.discard(panel)
    disable_cell_mode(ipython)
    config.settings().unobserve(_cells_setting, "cells")
    flight.on_unload(ipython)
    session.reset()
    registry.SCHEDULE.wait_idle()  # no panel timer thread outlives the extension
    magics = ipython.magics_manager.magics
    for kind in ("line", "cell"):
        magics[kind].pop("gpumon", None)
    ipython.magics_manager.registry.pop("GPUMonMagics", None)
