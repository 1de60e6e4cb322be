"""Fixtures shared by every test area."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def nvml():
    """The real pynvml module, initialised for the test module; skip where NVML is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no library, no driver, no GPU
        pytest.skip(f"NVML not available here: {exc}")
    yield pynvml
    pynvml.nvmlShutdown()
