"""One refresh timer for every panel of the kernel, whatever the number of panels.

A panel that updates is *scheduled*; the single timer thread wakes when the earliest one
is due, refreshes the due panels one after another and sleeps again. A stopped, paused
or closed panel, or one whose output was cleared, is not scheduled and costs nothing;
with no panel scheduled the thread ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("nbgpu")


def due(next_at: dict[int, float], now: float) -> list[int]:
    """Ids of the entries due at ``now``, earliest first (the pure part of the timer)."""
    return sorted((k for k, t in next_at.items() if t <= now), key=next_at.__getitem__)


class RefreshSchedule:
    """Calls each scheduled panel's ``tick()`` every ``panel.refresh_s`` from one thread.

    ``tick()`` returns a number of seconds to be ticked again sooner than ``refresh_s``, or
    False when the panel should leave the schedule (closed, or its
    front end went away).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, thread: bool = True) -> None:
        """``thread=False``: no timer thread; the owner calls ``step(now)`` (a fake clock)."""
        self._clock = clock
        self._threaded = thread
        self._cond = threading.Condition()
        self._panels: dict[int, object] = {}
        self._next_at: dict[int, float] = {}
        self._thread: threading.Thread | None = None

    def add(self, panel, first_in_s: float) -> None:
        """Schedule ``panel``: its first tick in ``first_in_s`` seconds (kept if already there)."""
        with self._cond:
            key = id(panel)
            if key not in self._panels:
                self._panels[key] = panel
                self._next_at[key] = self._clock() + first_in_s
            if self._threaded and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._loop, name="nbgpu-panels", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def remove(self, panel) -> None:
        """Take ``panel`` off the schedule (no-op if it is not on it)."""
        with self._cond:
            self._panels.pop(id(panel), None)
            self._next_at.pop(id(panel), None)
            self._cond.notify_all()

    def has(self, panel) -> bool:
        """Whether ``panel`` is on the schedule."""
        with self._cond:
            return id(panel) in self._panels

    def scheduled(self) -> int:
        """How many panels are on the schedule."""
        with self._cond:
            return len(self._panels)

    def threads(self) -> int:
        """Timer threads alive: 0 or 1."""
        thread = self._thread
        return int(thread is not None and thread.is_alive())

    def wait_idle(self, timeout_s: float = 1.0) -> bool:
        """With no panel scheduled, wait for the timer thread to end; True when none is left."""
        with self._cond:
            thread = None if self._panels else self._thread
            self._cond.notify_all()
        if thread is not None:
            thread.join(timeout_s)
        return self.threads() == 0 or bool(self.scheduled())

    def step(self, now: float) -> int:
        """Tick every panel due at ``now`` (what the thread does when it wakes); returns how many."""
        with self._cond:
            ready = [(k, self._panels[k]) for k in due(self._next_at, now)]
        for key, panel in ready:
            keep, delay_s = True, None
            try:
                res = panel.tick()
                keep = res is not False
                if isinstance(res, (int, float)) and not isinstance(res, bool):
                    delay_s = float(res)  # the panel asks to be ticked again this soon
            except Exception:  # a panel's failure is its own; the others go on
                log.debug("panel tick failed", exc_info=True)
            with self._cond:
                if key not in self._panels:
                    continue
                if keep:
                    # Counted from the tick's end, so what one refresh sends is refresh_s or
                    # more after what the last one sent, however long the refresh took.
                    step_s = panel.refresh_s if delay_s is None else delay_s
                    self._next_at[key] = max(now, self._clock(), self._next_at[key]) + step_s
                else:
                    self._panels.pop(key, None)
                    self._next_at.pop(key, None)
        return len(ready)

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._panels:
                    self._thread = None
                    return
                wait = min(self._next_at.values()) - self._clock()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
            self.step(self._clock())


SCHEDULE = RefreshSchedule()
