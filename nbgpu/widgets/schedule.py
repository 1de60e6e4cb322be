"""One refresh timer for every panel of the kernel: one thread ticks the due panels; a panel not
updating is not scheduled and costs nothing, and with none scheduled the thread ends."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("nbgpu")


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
