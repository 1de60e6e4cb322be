"""Find the live panel and run its refresh path without a browser, as a displayed panel does."""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass

BUFFER_RATES_HZ = {"power": 50.0, "util": 5.0, "memutil": 5.0}


def prefill(sampler, seconds: float) -> int:
    """Append ``seconds`` of synthetic history, ending now, at the sampler's real rates.

    A panel opened on this store draws full sparklines at once, as one open for a while
    does, so its refresh cost and traffic are those of the steady state.
    """
    import numpy as np

    store = sampler.store
    now = time.time()
    rng = np.random.default_rng(0)
    rows = 0
    for device in store.devices():
        for stream in store.streams_of(device):
            rate = BUFFER_RATES_HZ.get(stream, 1.0 / sampler.interval)
            times = now - seconds + np.arange(int(seconds * rate)) / rate
            cols = store._streams[(device, stream)].columns
            store.append_many(device, stream, times, {c: rng.random(len(times)) * 50 for c in cols})
            rows += len(times)
    return rows


def backdate(sampler, seconds: float) -> None:
    """Make a just-started sampler look started ``seconds`` ago, as the history ``prefill``
    gave it says: a panel then draws its whole window at once, as one open for a while does,
    instead of the growing span of a fresh sampler (a whole read of the window each time
    the span steps up)."""
    sampler.started_at = min(sampler.started_at, sampler.now() - seconds)


@dataclass
class PanelRun:
    """A panel over a sampler, updating from its own timer thread; ``stop()`` closes it."""

    panel: object
    t0: float
    comms: object = None  # a started ``KernelLikeComms``, or None for the recording comm

    def stop(self) -> dict:
        from .comm_recorder import LOG

        t1 = time.perf_counter()
        stats = dict(getattr(self.panel, "stats", {}))
        sent = LOG.between(self.t0, t1)
        self.panel.close()
        if self.comms is not None:
            self.comms.stop()
        return {"refreshes": stats.get("refreshes"), "skipped": stats.get("skipped"),
                "panel_errors": stats.get("errors"), "messages": len(sent),
                "bytes": None if self.comms is not None else sum(m.nbytes for m in sent),
                "comm": "kernel-like" if self.comms is not None else "recording"}


@dataclass
class PanelAPI:
    """Whether the panel can be driven here, why not, and how."""

    available: bool
    reason: str = ""
    cls: object = None

    def default_window_s(self) -> float:
        """Seconds of history the panel shows by default."""
        default = inspect.signature(self.cls).parameters["window_s"].default
        if default is None:  # the panel reads NbGpu.window_s when it is made
            from nbgpu.config import settings

            default = settings().window_s
        return float(default)

    def drive(self, sampler, kernel_like: bool = False, **kwargs) -> PanelRun:
        """Open a panel on ``sampler`` (default refresh rate) and let its timer run; its
        messages go to a recording comm, or with ``kernel_like`` through a kernel's session
        and IOPub thread (``comm_recorder.KernelLikeComms``)."""
        from .comm_recorder import KernelLikeComms, install

        if not self.available:
            raise RuntimeError(self.reason)
        comms = KernelLikeComms().start() if kernel_like else None
        if comms is None:
            install()
        t0 = time.perf_counter()
        panel = self.cls(sampler=sampler, start=True, **kwargs)
        show(panel)
        return PanelRun(panel, t0, comms)


def show(panel) -> None:
    """What a front end's view of ``panel`` sends once on screen: panels refresh only then."""
    views = getattr(panel, "views", None)
    if views is not None:
        views.comm.handle_msg({"content": {"data": {"method": "custom", "content": {
            "view": "benchmark", "visible": True}}}, "buffers": []})


def find_panel() -> PanelAPI:
    """The panel class (``nbgpu.widgets.monitor.GPUMonitor``) if it and its refresh path exist here."""
    try:
        from nbgpu.widgets.monitor import GPUMonitor
    except ImportError as exc:
        return PanelAPI(False, f"panel unavailable: {exc}")
    if not callable(getattr(GPUMonitor, "refresh", None)):
        return PanelAPI(False, "panel unavailable: GPUMonitor has no refresh()")
    return PanelAPI(True, cls=GPUMonitor)
