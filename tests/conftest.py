"""Fixtures shared by every test area."""

from __future__ import annotations

import os

import pytest

# Kernels of other tests keep no flight record and report none (tests/test_flight.py turns
# it on, with its own cache folder); a killed test kernel must not speak at the next load.
os.environ["NBGPU_FLIGHT_RECORDER"] = "0"


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
