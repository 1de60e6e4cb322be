"""nbgpu's exception tree: everything nbgpu raises on purpose, one line each, saying what to do.

    NbgpuError                      root of everything nbgpu raises on purpose
    ├── BadArgumentError            an argument out of range or of the wrong kind (also a ValueError)
    ├── SamplerStateError           the call does not fit the sampler's state (e.g. starting a closed one)
    ├── NVMLUnavailableError        NVML could not be started: no driver, no library, no GPU;
    │                               ``code`` (the NVML return code or None) and ``hint`` as fields
    ├── SourceError                 a source failed in a way the caller must hear about
    └── FileError                   an export, record or report file cannot be written or read;
                                    ``path`` is the user's path, never a temporary file

``except ValueError`` still catches bad arguments. Lower-level errors are translated with
``raise ... from exc``: the original stays in ``__cause__``, ``str(exc)`` one actionable line.
"""

from __future__ import annotations

import logging
import os
import warnings


class NbgpuError(Exception):
    """Root of nbgpu's own errors; catch this to catch everything nbgpu raises on purpose."""


class BadArgumentError(NbgpuError, ValueError):
    """An argument is out of range or of the wrong kind; the message says what is allowed."""


class SamplerStateError(NbgpuError):
    """The call does not fit the sampler's state (starting a closed sampler, reading a closed source)."""


class NVMLUnavailableError(NbgpuError):
    """NVML cannot be used here; ``code`` is NVML's return code (None if none) and ``hint`` what to try."""

    def __init__(self, message: str, *, code: int | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint


class SourceError(NbgpuError):
    """A source failed (Prometheus unreachable, a simulated fault the caller asked to see)."""


class FileError(NbgpuError):
    """A file cannot be written or read as asked; ``path`` is the path the user gave."""

    def __init__(self, message: str, *, path: str | os.PathLike | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = None if path is None else os.fspath(path)


def warn_user(message: str) -> None:
    """One line the notebook user sees (a UserWarning under the cell), also logged: for failures
    found after their call returned (a background write); callers say each once."""
    logging.getLogger("nbgpu").warning("%s", message)
    warnings.warn(message, UserWarning, stacklevel=3)
