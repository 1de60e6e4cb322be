"""One call started now, its result (or exception) taken later by the caller.

``%gpumon`` opens the sampler's source this way on a helper thread while the main thread
imports the panel's modules: NVML's calls release the GIL, so on a real GPU the probe and
the sampler's first tick overlap the imports instead of following them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """Run ``fn()`` now on a daemon thread named ``thread``; ``result()`` waits and gives it.

    With ``thread`` None nothing starts now: ``result()`` runs ``fn()`` on the caller's thread.
    """

    def __init__(self, fn: Callable[[], T], thread: str | None) -> None:
        self._fn = fn
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = None if thread is None else threading.Thread(target=self._run, name=thread,
                                                                   daemon=True)
        if self._thread is not None:
            self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as exc:  # handed to the caller, raised there
            self._error = exc

    def result(self) -> T:
        """Wait for the call to end; return its value or raise its exception here."""
        if self._thread is None:
            self._run()
        else:
            self._thread.join()
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        return self._value  # type: ignore[return-value]
