"""A sample-buffer drain is one NVML call, where pynvml's own function makes two.

pynvml's ``nvmlDeviceGetSamples`` runs here for real, against a C function that stands in
for NVML's (``_nvmlGetFunctionPointer`` patched), so the count of C calls is the count a
real driver would see.
"""

from __future__ import annotations

import numpy as np
import pytest

pynvml = pytest.importorskip("pynvml")

import nbgpu  # noqa: E402
from nbgpu.sources import nvml_samples  # noqa: E402
from nbgpu.sources.nvml import NothingNewError, NotSupportedError, NVMLGateway  # noqa: E402

T0_US = 1_700_000_000_000_000


class CNvml:
    """NVML's C ``nvmlDeviceGetSamples`` over ``n`` buffered samples 20 ms apart."""

    def __init__(self, n: int, insufficient_size: bool = False, error: int = 0) -> None:
        self.stamps = [T0_US + 20_000 * i for i in range(n)]
        self.values = [300_000 + i for i in range(n)]
        self.insufficient_size = insufficient_size
        self.error = error
        self.calls: list[str] = []  # "size" (no array) or "fill"

    def __call__(self, device, sampling_type, since_us, value_type, count, samples) -> int:
        self.calls.append("size" if samples is None else "fill")
        if self.error:
            return self.error
        newer = [i for i, t in enumerate(self.stamps) if t > since_us.value]
        if not newer:
            return 6  # NVML_ERROR_NOT_FOUND
        value_type._obj.value = 1  # unsigned int
        if samples is None:
            count._obj.value = len(newer)
            return 0
        if self.insufficient_size and count._obj.value < len(newer):
            return 7  # NVML_ERROR_INSUFFICIENT_SIZE
        filled = newer[:count._obj.value]
        for slot, i in enumerate(filled):
            samples[slot].timeStamp = self.stamps[i]
            samples[slot].sampleValue.uiVal = self.values[i]
        count._obj.value = len(filled)
        return 0


@pytest.fixture
def c_nvml(monkeypatch):
    def install(c: CNvml) -> CNvml:
        monkeypatch.setattr(pynvml, "_nvmlGetFunctionPointer", lambda name: c)
        return c

    return install


def test_a_drain_is_one_nvml_call_where_pynvmls_own_function_makes_two(c_nvml) -> None:
    c = c_nvml(CNvml(120))
    pynvml.nvmlDeviceGetSamples(None, 0, 0)
    assert c.calls == ["size", "fill"]  # pynvml's way: the size, then the samples
    c.calls.clear()
    ts, vals = NVMLGateway(pynvml).samples(None, 0, 0)
    assert c.calls == ["fill"]
    np.testing.assert_array_equal(ts, np.array(c.stamps, np.float64))
    np.testing.assert_array_equal(vals, np.array(c.values, np.float64))


def test_the_one_call_drain_reads_what_pynvmls_reads(c_nvml) -> None:
    c = c_nvml(CNvml(120))
    gw = NVMLGateway(pynvml)
    for since in (0, T0_US + 20_000 * 100, T0_US + 20_000 * 118):
        got = gw.samples(None, 0, since)
        _, listed = pynvml.nvmlDeviceGetSamples(None, 0, since)
        np.testing.assert_array_equal(got[0], [float(s.timeStamp) for s in listed])
        np.testing.assert_array_equal(got[1], [float(s.sampleValue.uiVal) for s in listed])
    assert c.calls.count("size") == 3  # pynvml's three, none of the gateway's


def test_a_buffer_larger_than_the_array_is_read_whole_and_the_array_grows(c_nvml) -> None:
    big = nvml_samples.FIRST_CAPACITY + 44
    c = c_nvml(CNvml(big))
    gw = NVMLGateway(pynvml)
    ts, _ = gw.samples(None, 0, 0)
    assert len(ts) == big and ts[-1] == c.stamps[-1]  # filled the array: read again, all of it
    reader = gw._own["nvmlDeviceGetSamples"]
    assert reader.rereads == 1 and reader.capacity >= 2 * big
    c.calls.clear()
    ts, _ = gw.samples(None, 0, 0)
    assert len(ts) == big and c.calls == ["fill"]


def test_insufficient_size_reads_again_the_pynvml_way(c_nvml) -> None:
    c = c_nvml(CNvml(nvml_samples.FIRST_CAPACITY + 1, insufficient_size=True))
    ts, _ = NVMLGateway(pynvml).samples(None, 0, 0)
    assert len(ts) == nvml_samples.FIRST_CAPACITY + 1
    assert c.calls == ["fill", "size", "fill"]


@pytest.mark.parametrize(("code", "kind"), [(6, NothingNewError), (3, NotSupportedError)])
def test_nvml_return_codes_become_the_gateways_errors(c_nvml, code, kind) -> None:
    c_nvml(CNvml(10, error=code))
    with pytest.raises(kind):
        NVMLGateway(pynvml).samples(None, 0, 0)


def test_nothing_newer_is_nothing_new(c_nvml) -> None:
    c = c_nvml(CNvml(10))
    with pytest.raises(NothingNewError):
        NVMLGateway(pynvml).samples(None, 0, c.stamps[-1])


def test_a_binding_without_function_pointers_is_called_as_it_is() -> None:
    class Plain:
        NVMLError = Exception

        def nvmlDeviceGetSamples(self, handle, kind, since):  # noqa: N802 - pynvml's name
            return 1, []

    assert NVMLGateway(Plain())._own == {}


def test_the_stand_in_answers_the_c_call_as_nvml_does() -> None:
    import ctypes

    clock = [1.7e9]
    sim = nbgpu.SimulatedGPUs(count=1, seed=0, clock=lambda: clock[0])
    sim.nvmlInit()
    clock[0] += 3.0
    h = sim.nvmlDeviceGetHandleByIndex(0)
    fn = sim._nvmlGetFunctionPointer("nvmlDeviceGetSamples")
    vtype, count = ctypes.c_uint(0), ctypes.c_uint(0)

    def call(array) -> int:
        return fn(h, ctypes.c_uint(0), ctypes.c_ulonglong(0), ctypes.byref(vtype), ctypes.byref(count), array)

    assert call(None) == 0
    kept = count.value
    assert kept == 120 and vtype.value == 1
    array = (sim.c_nvmlSample_t * 50)()
    count.value = 50
    assert call(array) == 0
    _, listed = sim.nvmlDeviceGetSamples(h, 0, 0)
    assert count.value == 50
    assert [s.timeStamp for s in array] == [s.timeStamp for s in listed[:50]]  # oldest first
    sim.inject_error("nvmlDeviceGetSamples", 6)
    assert call(array) == 6


def test_a_sampler_stores_the_same_samples_through_one_call_as_through_two(monkeypatch) -> None:
    def stored(one_call: bool) -> tuple[np.ndarray, np.ndarray]:
        clock = [1.7e9]
        sim = nbgpu.SimulatedGPUs(count=1, seed=3, clock=lambda: clock[0])
        if not one_call:
            monkeypatch.setattr(nvml_samples.OneCallSamples, "available", staticmethod(lambda nvml: False))
        sampler = nbgpu.Sampler(source=sim, clock=lambda: clock[0])
        for _ in range(12):
            clock[0] += 1.0
            sampler.step(clock[0])
        t, v = sampler.store.series(0, "power_w")
        sampler.stop()
        monkeypatch.undo()
        return t, v

    t1, v1 = stored(one_call=True)
    t2, v2 = stored(one_call=False)
    assert len(t1) > 400  # 50 Hz over the steps
    np.testing.assert_array_equal(t1, t2)
    np.testing.assert_array_equal(v1, v2)
