"""The sampler's one thread: start/stop (safe from any thread), the loop calling ``step()``, waits
for steps. ``stop()`` waits on a hanging read at most ``STOP_WAIT_S``; the thread closes the source."""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
import weakref
from typing import TYPE_CHECKING

from .errors import SamplerStateError
from .store import Event

if TYPE_CHECKING:
    from collections.abc import Callable

    from .sampler import Sampler

STOP_WAIT_S = 1.0  # stop() returns after this even if the thread is inside a hanging read
EDGE_WAIT_S = 0.5
EDGE_CHECK_S = 0.05  # a waiting edge re-checks at least this often (sampler stopped?)

_running: weakref.WeakSet[Sampler] = weakref.WeakSet()


def running_samplers() -> list[Sampler]:
    """Samplers whose thread is running in this process."""
    return [s for s in list(_running) if s.running]


@atexit.register
def _stop_all_at_exit() -> None:
    """Interpreter exit: stop every running sampler and release its source."""
    for s in list(_running):
        with contextlib.suppress(Exception):
            s.stop(timeout_s=0.5)


class SamplerThread:
    """The lifecycle half of ``nbgpu.Sampler``: its background thread and its source's end."""

    @property
    def state(self) -> str:
        """"running", "stopping" (its thread is still inside a read), "stopped" or "closed"."""
        t = self._thread
        if t is not None and t.is_alive():
            return "stopping" if self._stop_event.is_set() else "running"
        return "closed" if self._closed else "stopped"

    @property
    def running(self) -> bool:
        """Whether the thread runs and has not been asked to stop."""
        return self.state == "running"

    @property
    def simulated(self) -> bool:
        return bool(getattr(self.source, "simulated", False))

    def start(self) -> Sampler:
        """Start the background thread (no-op if running, safe from any thread); returns self."""
        with self._life:
            if self._closed or self._close_requested:
                raise SamplerStateError("this Sampler is closed (stop() released its source); "
                                        "create a new Sampler, or pause with stop(close=False) "
                                        "to start it again")
            if (t := self._thread) is not None and t.is_alive():
                if self._stop_event.is_set():
                    raise SamplerStateError("this Sampler is still stopping (its thread is "
                                            "inside a read that has not returned); try again "
                                            "when status().state is 'stopped'")
                return self
            self._stop_event.clear()
            self._stop_overdue = False
            self._wake.clear()
            self.started_at = self._clock()
            self.stopped_at = None
            self.store.add_event(Event(self.started_at, "sampler", "started"))
            self._thread = threading.Thread(target=self._run, name="nbgpu-sampler", daemon=True)
            self._thread.start()
            _running.add(self)
        return self

    def stop(self, close: bool = True, timeout_s: float = STOP_WAIT_S) -> None:
        """Stop the thread, waiting at most ``timeout_s``; ``close`` also releases the source.
        A hanging read leaves ``status().state`` "stopping" until it returns. Data stays readable."""
        with self._life:
            if close:
                self._close_requested = True
            if (t := self._thread) is not None:
                self._stop_event.set()
                self._wake.set()
                if t is not threading.current_thread():
                    t.join(timeout_s)
                if t.is_alive():
                    self._stop_overdue = True  # a read hangs: its end makes no last drain
                    return
                self._thread = None
            _running.discard(self)
            if close:
                self._close_source()

    def _close_source(self) -> None:
        with self._close_lock:
            if not self._closed:
                self._closed = True
                self.source.close()
                if self._host is not None:
                    self._host.close()

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed and not self.running:
                self.source.close()

    def __repr__(self) -> str:
        return (f"<nbgpu.Sampler {self.source.kind} {len(self.devices)} device(s) "
                f"every {self.interval:g}s, {self.state}, {self.ticks} ticks>")

    def _run(self) -> None:
        try:
            while not self._stop_event.is_set():
                self._wake.clear()
                self.step()
                wait = self._wake_at - self._clock()
                if wait > 0 and not self._stop_event.is_set():
                    self._wake.wait(wait)
            if not self._stop_overdue:  # the last step drains what the buffers still hold
                self.request("edge")
                self.step()
        except SamplerStateError:
            pass
        finally:  # the thread's last act: record the stop, end ongoing alerts, close the source if asked
            self.stopped_at = self._clock()
            if self.diagnostics is not None:
                self.diagnostics.close_all()
            self.store.add_event(Event(self.stopped_at, "sampler", "stopped"))
            _running.discard(self)
            if self._close_requested:
                self._close_source()


def _wait(sampler: Sampler, ready: Callable[[list[float]], bool], timeout_s: float,
          edge: bool = False) -> bool:
    """Wait, woken by each step, until ``ready(times of the steps so far)``; ``edge`` requests one
    first. False on timeout or once the sampler stops running."""
    steps: list[float] = []
    stepped = threading.Event()

    def on_step(_sampler: Sampler, now: float) -> None:
        steps.append(now)
        stepped.set()

    deadline = time.monotonic() + timeout_s
    sampler.add_listener(on_step)
    try:
        if edge:
            sampler.request("edge")
        while not ready(steps):
            left = deadline - time.monotonic()
            if left <= 0 or not sampler.running:
                return False
            stepped.wait(min(left, EDGE_CHECK_S))
            stepped.clear()
        return True
    finally:
        sampler.remove_listener(on_step)


def wait_for_edge(sampler: Sampler, t: float, timeout_s: float | None = None,
                  also: Callable[[], bool] | None = None) -> bool:
    """Wait until every live GPU has a tick reading at or after ``t`` and ``also()`` (if given)
    is False; at most ``timeout_s`` (``EDGE_WAIT_S``). False on timeout or if not running."""
    if not sampler.running:
        return False
    lost = sampler.lost
    keys = [d.key for d in sampler.devices if d.key not in lost]
    last = sampler.store.last

    def done(_steps: list[float]) -> bool:  # every GPU has a memory or energy reading at or after t
        return (all(last(k, "mem_used_bytes")[0] >= t or last(k, "energy_j")[0] >= t for k in keys)
                and not (also is not None and also()))

    return done([]) or _wait(sampler, done, EDGE_WAIT_S if timeout_s is None else timeout_s)


def fetch_buffered(sampler: Sampler, t: float, timeout_s: float | None = None) -> bool:
    """Have the sampler drain NVML's buffers up to ``t`` (a block's end) now and wait for it: two
    steps at or after ``t``. False if the sampler is stopped or does not answer."""
    return sampler.running and _wait(sampler, lambda steps: sum(now >= t for now in steps) >= 2,
                                     EDGE_WAIT_S if timeout_s is None else timeout_s, edge=True)
