"""The panels of this kernel (for ``%gpumon stop``, ``%unload_ext``; stopped ones held weakly), every
widget a panel holds (layouts, styles, marks, scales), so closing it leaks none, and their one refresh
timer: one thread ticks the due panels; with none scheduled it ends."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterable

from ipywidgets import Widget

log = logging.getLogger("nbgpu")
_lock = threading.Lock()
_panels: dict = {}  # running panels, oldest first (an ordered set)
_stopped: weakref.WeakSet = weakref.WeakSet()
_shared: set[int] = set()  # ids of widgets many panels use at once (kept alive by their owner)


def add(panel) -> None:
    """Hold a panel that runs (or is about to)."""
    with _lock:
        _stopped.discard(panel)
        _panels.setdefault(panel, None)


def park(panel) -> None:
    """A panel stopped but still on screen: no longer held, still reachable while it lives."""
    with _lock:
        _panels.pop(panel, None)
        _stopped.add(panel)


def discard(panel) -> None:
    """Forget a closed panel."""
    with _lock:
        _panels.pop(panel, None)
        _stopped.discard(panel)


def current_cell() -> str | None:
    """Id of the notebook cell being run (JupyterLab and Notebook 7 send it), else None."""
    try:
        from IPython import get_ipython

        kernel = getattr(get_ipython(), "kernel", None)
        parent = kernel.get_parent("shell") if kernel is not None else None
        return (parent or {}).get("metadata", {}).get("cellId") or None
    except Exception:
        return None


def close_from_cell(cell: str | None, keep=None) -> int:
    """Close the panels an earlier run of ``cell`` opened (its output is gone); returns how many."""
    old = [p for p in panels() + stopped() if p is not keep and getattr(p, "origin", None) == cell] \
        if cell is not None else []
    for p in old:
        p.close()
    return len(old)


def panels() -> list:
    """Panels started and not stopped or closed, oldest first."""
    with _lock:
        return list(_panels)


def stopped() -> list:
    """Stopped panels still on screen (those nothing else holds may be gone already)."""
    with _lock:
        return list(_stopped)


def stop_all() -> int:
    """Stop every running panel's updates (they stay on screen, marked stopped); returns how many."""
    items = panels()
    for p in items:
        p.stop()
    return len(items)


def close_all() -> int:
    """Stop and close every panel, stopped ones too (removes them from the page); returns how many."""
    items = panels() + stopped()
    for p in items:
        p.close()
    return len(items)


def share(widget: Widget) -> Widget:
    """Mark ``widget`` as used by many panels: ``close_widgets`` never closes it. Returns it."""
    _shared.add(id(widget))
    return widget


def _widgets_in(value: object) -> Iterable[Widget]:
    if isinstance(value, Widget):
        yield value
    elif isinstance(value, (list, tuple, dict)):
        for item in value.values() if isinstance(value, dict) else value:
            yield from _widgets_in(item)


def descendants(root: Widget) -> list[Widget]:
    """``root`` and every widget reachable from its synced traits (children, layout, marks...)."""
    seen: dict[int, Widget] = {}
    stack = [root]
    while stack:
        w = stack.pop()
        if id(w) not in seen:
            seen[id(w)] = w
            for name in w.keys:
                stack.extend(_widgets_in(getattr(w, name, None)))
    return list(seen.values())


def close_widgets(widgets: Iterable[Widget], keep: Iterable[Widget] = ()) -> int:
    """Close each widget not in ``keep`` nor shared; returns how many were closed."""
    kept = {id(w) for w in keep} | _shared
    doomed = [w for w in widgets if id(w) not in kept and w.comm is not None]
    for w in doomed:
        w.close()
    return len(doomed)


class RefreshSchedule:
    """Calls each scheduled panel's ``tick()`` every ``panel.refresh_s`` (False leaves the
    schedule, seconds ticks sooner); ``thread=False``: the owner calls ``step(now)`` instead."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, thread: bool = True) -> None:
        self._clock = clock
        self._threaded = thread
        self._cond = threading.Condition()
        self._due: dict[int, list] = {}  # id(panel): [panel, clock time of its next tick]
        self._thread: threading.Thread | None = None

    def add(self, panel, first_in_s: float) -> None:
        """Schedule ``panel``: its first tick in ``first_in_s`` seconds (kept if already there)."""
        with self._cond:
            self._due.setdefault(id(panel), [panel, self._clock() + first_in_s])
            if self._threaded and not self.threads():
                self._thread = threading.Thread(target=self._loop, name="nbgpu-panels", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def remove(self, panel) -> None:
        """Take ``panel`` off the schedule (no-op if it is not on it)."""
        with self._cond:
            self._due.pop(id(panel), None)
            self._cond.notify_all()

    def has(self, panel) -> bool:
        with self._cond:
            return id(panel) in self._due

    def scheduled(self) -> int:
        with self._cond:
            return len(self._due)

    def threads(self) -> int:
        """Timer threads alive: 0 or 1."""
        thread = self._thread
        return int(thread is not None and thread.is_alive())

    def wait_idle(self, timeout_s: float = 1.0) -> bool:
        """With no panel scheduled, wait for the timer thread to end; True when none is left."""
        with self._cond:
            thread = None if self._due else self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout_s)
        return self.threads() == 0 or bool(self.scheduled())

    def step(self, now: float) -> int:
        """Tick every panel due at ``now``, earliest first; returns how many."""
        with self._cond:
            ready = [panel for panel, at in sorted(self._due.values(), key=lambda e: e[1]) if at <= now]
        for panel in ready:
            res = True
            try:
                res = panel.tick()
            except Exception:  # a panel's failure is its own; the others go on
                log.debug("panel tick failed", exc_info=True)
            with self._cond:
                if (entry := self._due.get(id(panel))) is None:
                    continue
                if res is False:
                    self.remove(panel)
                else:  # from the tick's end: refresh_s or more between what two refreshes send
                    step_s = panel.refresh_s if res is True else res
                    entry[1] = max(now, self._clock(), entry[1]) + float(step_s)
        return len(ready)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._due:
                    self._thread = None
                    return
                wait = min(at for _, at in self._due.values()) - self._clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
            self.step(self._clock())


SCHEDULE = RefreshSchedule()
