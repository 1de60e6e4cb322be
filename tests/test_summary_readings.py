"""The summary's one-pass store read gives the series and bucket flag of a stream-by-stream read."""

from __future__ import annotations

import numpy as np
import pytest

from nbgpu.profiles.energy import SUMMARY_METRICS, timeline_readings
from nbgpu.sources.base import Device
from nbgpu.store import Store
from nbgpu.timeline import Timeline

T0 = 1_800_000_000.0


def _store(full_res_s: float = 3600.0) -> Timeline:
    """Two GPUs: a tick stream every 0.5 s and two single-column buffers beside it."""
    store = Store(full_res_s=full_res_s, bucket_s=10.0)
    rng = np.random.default_rng(3)
    for gpu in (0, 1):
        store.declare(gpu, "tick", {m: np.float64 for m in SUMMARY_METRICS})
        store.declare(gpu, "power", {"power_w": np.float64})
        store.declare(gpu, "memory", {"mem_used_bytes": np.float64})
        tick = np.arange(0.0, 200.0, 0.5)
        values = {m: rng.uniform(0, 100, len(tick)) for m in SUMMARY_METRICS}
        values["energy_j"] = 1e6 + np.cumsum(values["power_w"])
        store.append_many(gpu, "tick", T0 + tick, values)
        power = np.arange(0.0, 200.0, 0.02)
        store.append_many(gpu, "power", T0 + power, {"power_w": rng.uniform(100, 700, len(power))})
        mem = np.arange(0.0, 200.0, 0.1)
        used = rng.uniform(1e9, 8e10, len(mem))
        used[(mem >= 40) & (mem < 60)] = np.nan  # 20 s of failed reads: buckets with no value
        store.append_many(gpu, "memory", T0 + mem, {"mem_used_bytes": used})
    return Timeline(store, [Device(0, "a"), Device(1, "b")])


def _each_stream(tl: Timeline, gpu: int, metric: str, a: float, b: float):
    """``metric`` of ``gpu`` read stream by stream over [a, b], NaN dropped, merged in time order."""
    parts = [tl.store.read_stream(gpu, s, a, b) for s in tl.store.streams_of(gpu)]
    t = np.concatenate([p[0] for p in parts if metric in p[1]])
    v = np.concatenate([p[1][metric] for p in parts if metric in p[1]]).astype(np.float64)
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    return t[v == v], v[v == v]


def _bucketed(tl: Timeline, gpu: int, t0: float, t1: float) -> bool:
    return any(tl.store.read_stream(gpu, s, t0, t1)[2].any() for s in tl.store.streams_of(gpu))


@pytest.mark.parametrize("full_res_s", [3600.0, 120.0])
def test_one_pass_equals_reading_each_stream(full_res_s):
    tl = _store(full_res_s)
    for start in (2.0, 30.0, 45.0, 55.0, 79.0, 81.0, 150.0, 199.0):
        for length in (0.0, 0.01, 3.0, 30.0):
            a, b = T0 + start - 5.0, T0 + start + length + 5.0
            for lo, hi in ((a + 5.0, b - 5.0), (a, b), (a + 1.0, b - 7.0)):
                fast = timeline_readings(tl, [0, 1], a, b, lo, hi)
                for gpu, got in zip((0, 1), fast, strict=True):
                    for m in SUMMARY_METRICS:
                        gt, gv = got.series(m)
                        wt, wv = _each_stream(tl, gpu, m, a, b)
                        np.testing.assert_array_equal(gt, wt)
                        np.testing.assert_array_equal(gv, wv)
                    assert got.bucketed == _bucketed(tl, gpu, lo, hi), (full_res_s, start, length)
