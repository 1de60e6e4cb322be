"""The kernel's one shared sampler (magics, panels, cell profiles); another source or interval
replaces it. ``listed_source()`` keeps ``%load_ext``'s NVML source for it: NVML opens once."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from .config import check_interval, settings
from .sampler import Sampler
from .sources import resolve_source

_lock = threading.RLock()
_shared: Sampler | None = None
_settings: tuple[object, float] | None = None
_on_replace: list[Callable[[Sampler | None, Sampler], None]] = []
_listed: tuple[str, object] | None = None  # (source spec, its listed source) for the next start


def listed_source(source: str = "auto") -> object:
    """The NVML source ("auto", "nvml") with its GPUs listed (not probed), kept for the next
    sampler; raises what opening it raises (``NVMLUnavailableError`` without NVML)."""
    global _listed
    with _lock:
        if _listed is None or _listed[0] != source:
            _take_listed(None)
            src = resolve_source(source)
            src.open_listing()
            _listed = (source, src)
        return _listed[1]


def shared_sampler() -> Sampler | None:
    """The kernel's sampler if one was started (running or stopped), else None."""
    return _shared


def ensure_sampler(source: object = None, interval: float | None = None) -> Sampler:
    """The running shared sampler, started or replaced as the arguments require (None keeps what
    runs; first start: "auto", ``NbGpu.interval``); a bad ``interval`` replaces nothing."""
    global _shared, _settings
    with _lock:
        # first start: the configured default, read now (``%config NbGpu.interval``)
        cur_source, cur_interval = _settings or ("auto", check_interval(settings().interval))
        want_source = cur_source if source is None else source
        want_interval = cur_interval if interval is None else check_interval(interval)
        if _shared is not None and _shared.running and (want_source, want_interval) == _settings:
            return _shared
        new = Sampler(source=_take_listed(want_source), interval=want_interval)
        if (old := _shared) is not None:
            old.stop()
        _shared, _settings = new.start(), (want_source, want_interval)
        for fn in list(_on_replace):
            with contextlib.suppress(Exception):
                fn(old, new)
        return new


def _take_listed(source: object) -> object:
    """The listed source for ``source`` if there is one (the sampler probes it), else ``source``;
    a listed source of another spec is closed (``_take_listed(None)`` closes any)."""
    global _listed
    listed, _listed = _listed, None
    if listed is not None and isinstance(source, str) and listed[0] == source:
        return listed[1]
    if listed is not None:
        listed[1].close()
    return source


def on_replace(fn: Callable[[Sampler | None, Sampler], None]) -> Callable[[], None]:
    """Call ``fn(old, new)`` whenever the shared sampler is replaced (panels re-point); returns
    a function that unregisters ``fn`` (a stopped panel calls it, so none leak)."""
    _on_replace.append(fn)
    return lambda: _on_replace.remove(fn) if fn in _on_replace else None


def stop_shared() -> None:
    """Stop the shared sampler (its data stays readable); the next ensure_sampler restarts."""
    with _lock:
        if _shared is not None:
            _shared.stop()


def reset() -> None:
    """Stop and forget the shared sampler and listeners (used by %unload_ext)."""
    global _shared, _settings
    with _lock:
        stop_shared()
        _take_listed(None)
        _shared, _settings = None, None
        _on_replace.clear()
