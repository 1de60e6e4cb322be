"""``%config NbGpu.*`` in a real kernel reaches the sampler a new panel starts."""

from __future__ import annotations

import pytest

from conftest_profiles import kernel_fixture  # noqa: F401 - fixture

pytestmark = pytest.mark.kernel


def test_config_interval_reaches_a_new_monitor(kernel):
    reply, outputs = kernel.run("%load_ext nbgpu\n%config NbGpu.interval = 0.7\n"
                                "import nbgpu\nm = nbgpu.GPUMonitor(source='sim')")
    assert reply["status"] == "ok", outputs
    assert kernel.value("m.sampler.interval") == 0.7
    assert kernel.value("nbgpu.Sampler('sim').interval") == 0.7
