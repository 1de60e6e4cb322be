"""nbgpu's exception tree: everything raised on purpose derives from ``NbgpuError``, one line
saying what to do; lower-level errors are chained with ``raise ... from exc``."""

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
        self.code = code
        self.hint = hint


class SourceError(NbgpuError):
    """A source failed (Prometheus unreachable, a simulated fault the caller asked to see)."""


class FileError(NbgpuError):
    """A file cannot be written or read as asked; ``path`` is the path the user gave."""

    def __init__(self, message: str, *, path: str | os.PathLike | None = None) -> None:
        super().__init__(message)
        self.path = None if path is None else os.fspath(path)


def warn_user(message: str) -> None:
    """One line the notebook user sees (a UserWarning under the cell), also logged: for failures
    found after their call returned (a background write); callers say each once."""
    logging.getLogger("nbgpu").warning("%s", message)
    warnings.warn(message, UserWarning, stacklevel=3)
