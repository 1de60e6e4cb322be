"""Find the live panel and run its refresh path without a browser, as a displayed panel does."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PanelRun:
    """A panel over a sampler, updating from its own timer thread; ``stop()`` closes it."""

    panel: object
    t0: float

    def stop(self) -> dict:
        import time

        from .comm_recorder import LOG

        t1 = time.perf_counter()
        stats = dict(getattr(self.panel, "stats", {}))
        sent = LOG.between(self.t0, t1)
        self.panel.close()
        return {"refreshes": stats.get("refreshes"), "skipped": stats.get("skipped"),
                "panel_errors": stats.get("errors"), "messages": len(sent),
                "bytes": sum(m.nbytes for m in sent)}


@dataclass
class PanelAPI:
    """Whether the panel can be driven here, why not, and how."""

    available: bool
    reason: str = ""
    cls: object = None

    def drive(self, sampler, **kwargs) -> PanelRun:
        """Open a panel on ``sampler`` (default refresh rate) and let its timer run."""
        import time

        from .comm_recorder import install

        if not self.available:
            raise RuntimeError(self.reason)
        install()
        t0 = time.perf_counter()
        return PanelRun(self.cls(sampler=sampler, start=True, **kwargs), t0)


def find_panel() -> PanelAPI:
    """The panel class (``nbgpu.widgets.GPUMonitor``) if it and its refresh path exist here."""
    try:
        from nbgpu.widgets import GPUMonitor
    except ImportError as exc:
        return PanelAPI(False, f"panel unavailable: {exc}")
    if not callable(getattr(GPUMonitor, "refresh", None)):
        return PanelAPI(False, "panel unavailable: GPUMonitor has no refresh()")
    return PanelAPI(True, cls=GPUMonitor)
