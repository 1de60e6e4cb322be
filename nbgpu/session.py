"""The kernel's one shared sampler, used by the magics, panels and per-cell profiles.

Panels and cell profiles never start their own thread while this one runs. Asking for a
different ``source`` or ``interval`` replaces the shared sampler (the old one is stopped
first and its timeline stays readable); ``gpus``, ``window`` and ``metrics`` are per-panel
view settings and never touch the sampler.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .sampler import DEFAULT_INTERVAL_S, Sampler

_lock = threading.RLock()
_shared: Sampler | None = None
_settings: tuple[object, float] | None = None
_on_replace: list[Callable[[Sampler | None, Sampler], None]] = []


def shared_sampler() -> Sampler | None:
    """The kernel's sampler if one was started (running or stopped), else None."""
    return _shared


def ensure_sampler(source: object = None, interval: float | None = None) -> Sampler:
    """Return the running shared sampler, starting or replacing it as the arguments require.

    ``None`` for ``source`` or ``interval`` means "keep what runs" (or the default for a
    first start: source "auto", interval 1 s).
    """
    global _shared, _settings
    with _lock:
        cur_source, cur_interval = _settings if _settings else ("auto", DEFAULT_INTERVAL_S)
        want_source = cur_source if source is None else source
        want_interval = cur_interval if interval is None else float(interval)
        if _shared is not None and _shared.running and (want_source, want_interval) == _settings:
            return _shared
        new = Sampler(source=want_source, interval=want_interval)
        old = _shared
        if old is not None:
            old.stop()
        _shared, _settings = new.start(), (want_source, want_interval)
        for fn in list(_on_replace):
            try:
                fn(old, new)
            except Exception:
                pass
        return new


def on_replace(fn: Callable[[Sampler | None, Sampler], None]) -> Callable[[], None]:
    """Call ``fn(old, new)`` whenever the shared sampler is replaced (panels re-point).

    Returns a function that unregisters ``fn`` (a stopped panel calls it, so none leak).
    """
    _on_replace.append(fn)

    def unregister() -> None:
        if fn in _on_replace:
            _on_replace.remove(fn)

    return unregister


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
        _shared, _settings = None, None
        _on_replace.clear()
