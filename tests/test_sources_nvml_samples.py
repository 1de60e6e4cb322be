"""Sample buffers decoded straight from pynvml's ctypes array, equal to reading them one by one."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

pynvml = pytest.importorskip("pynvml")

from nbgpu.sources import nvml_gateway as nvml_mod  # noqa: E402
from nbgpu.sources.nvml_gateway import NVMLGateway  # noqa: E402

MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
VALUES = (2.5e5, 301_000, 2**40 + 3, 2**50 + 7, -(2**40), -123, 700)


class Binding:
    """A binding whose nvmlDeviceGetSamples answers as pynvml's does: a slice of a ctypes array."""

    def __init__(self, vtype: int, n: int) -> None:
        self.vtype = vtype
        self.array = (pynvml.c_nvmlSample_t * n)()
        for i in range(n):
            self.array[i].timeStamp = 1_700_000_000_000_000 + 20_000 * i
            setattr(self.array[i].sampleValue, MEMBERS[vtype],
                    type(VALUES[vtype])(VALUES[vtype] + (i if vtype else i * 0.5)))

    def nvmlDeviceGetSamples(self, handle, kind, since):  # noqa: N802 - pynvml's name
        return self.vtype, self.array[0:len(self.array)]


@pytest.mark.parametrize("vtype", range(7))
def test_packed_read_equals_one_by_one(vtype, monkeypatch):
    binding = Binding(vtype, 120)
    ts, vals = NVMLGateway(binding).samples(None, 0, 0)
    want_ts = [float(s.timeStamp) for s in binding.array]
    want_vals = [float(getattr(s.sampleValue, MEMBERS[vtype])) for s in binding.array]
    np.testing.assert_array_equal(ts, want_ts)
    np.testing.assert_array_equal(vals, want_vals)


def test_the_packed_read_does_not_copy_each_sample():
    binding = Binding(1, 50)
    assert isinstance(nvml_mod._raw(binding.nvmlDeviceGetSamples(None, 0, 0)[1]), ctypes.Array)
    ts, _ = NVMLGateway(binding).samples(None, 0, 0)
    assert len(ts) == 50


def test_samples_that_are_not_one_array_are_read_one_by_one():
    a, b = pynvml.c_nvmlSample_t(), pynvml.c_nvmlSample_t()
    a.timeStamp, b.timeStamp = 10, 30
    a.sampleValue.uiVal, b.sampleValue.uiVal = 1, 2

    class Scattered:
        def nvmlDeviceGetSamples(self, handle, kind, since):  # noqa: N802
            return 1, [a, b]

    assert isinstance(nvml_mod._raw([a, b]), bytes)
    ts, vals = NVMLGateway(Scattered()).samples(None, 0, 0)
    assert list(ts) == [10.0, 30.0] and list(vals) == [1.0, 2.0]
    assert ctypes.sizeof(a) == nvml_mod.SAMPLE_BYTES


def test_simulated_gpus_answer_as_pynvml_does_so_ci_decodes_them_the_packed_way():
    # The stand-in's samples are one ctypes array, as pynvml returns them: the decode that
    # runs on a real card (read at once, no per-sample step) is the one CI and demos run.
    import nbgpu

    clock = [1.7e9]
    sim = nbgpu.SimulatedGPUs(count=1, seed=0, clock=lambda: clock[0])
    sim.nvmlInit()
    handle = sim.nvmlDeviceGetHandleByIndex(0)
    clock[0] += 1.0
    vtype, listed = sim.nvmlDeviceGetSamples(handle, 0, 0)
    assert vtype == 1 and len(listed) >= 50  # a second of 20 ms samples
    assert isinstance(nvml_mod._raw(listed), ctypes.Array)
    ts, vals = NVMLGateway(sim).samples(handle, 0, 0)
    assert np.all(np.diff(ts) == 20_000) and np.all(vals > 0)
    np.testing.assert_array_equal(vals, [s.sampleValue.uiVal for s in listed])
    assert ctypes.sizeof(listed[0]) == nvml_mod.SAMPLE_BYTES
