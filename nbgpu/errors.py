"""nbgpu's exception tree.

    NbgpuError                      root of everything nbgpu raises on purpose
    ├── NVMLUnavailableError        NVML could not be started: no driver, no library, no GPU
    └── SourceError                 a source failed in a way the caller must hear about

Bad arguments raise ``ValueError`` (``BadArgumentError`` is both a ``ValueError`` and an
``NbgpuError``), so ``except ValueError`` keeps working for people who expect it.
"""

from __future__ import annotations


class NbgpuError(Exception):
    """Root of nbgpu's own errors."""


class BadArgumentError(NbgpuError, ValueError):
    """An argument is out of range or of the wrong kind; the message says what is allowed."""


class NVMLUnavailableError(NbgpuError):
    """NVML cannot be used here; the message names the NVML error and what to try."""


class SourceError(NbgpuError):
    """A source failed (Prometheus unreachable, a simulated fault the caller asked to see)."""
