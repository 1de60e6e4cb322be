"""A long session on a fake clock: 8 simulated GPUs for 26 hours, store memory flat once full.

The sampler runs at its defaults (store: an hour at full resolution, 10 s buckets for 24
hours) and is stepped with ``step(now)``. Simulating a day of load curves costs minutes,
so the GPUs here draw flat curves and the session wakes every 2 minutes of fake time (each
wake-up drains what NVML's buffers still hold); a second test feeds the store at the
full native rates of 8 H200s for 26 hours.
"""

from __future__ import annotations

import numpy as np

from nbgpu.sampler import Sampler
from nbgpu.sources.simulated import SimulatedGPUs
from nbgpu.store import Store
from nbgpu.store_stream import CHUNK_ROWS

T0 = 1_800_000_000.0
HOUR = 3600.0


class FlatGPUs(SimulatedGPUs):
    """Simulated GPUs with flat load: the same NVML path, cheap enough to run for a day."""

    def power_at(self, gpu: int, t: float) -> float:
        return 300.0 + gpu

    def util_at(self, gpu: int, t: float) -> float:
        return 50.0

    def util_window(self, gpu: int, t: float, window: float = 0.2) -> float:
        return 50.0

    def nvmlDeviceGetTotalEnergyConsumption(self, h) -> int:  # noqa: N802 - NVML's name
        return int((5.0e6 + self.power_at(h.gpu, 0.0) * self._t()) * 1000)


def rows_by_kind(store: Store, device, stream: str) -> tuple[int, int, float]:
    """(full-resolution rows, bucket rows, age of the oldest row) of one stream."""
    t, _, decimated = store.read_stream(device, stream)
    return int((~decimated).sum()), int(decimated.sum()), float(t[-1] - t[0]) if len(t) else 0.0


def test_a_26_hour_session_of_8_gpus_keeps_store_memory_flat_after_the_bounds_fill(stepped):
    clock = stepped.new_clock()
    sim = FlatGPUs(count=8, clock=clock)
    s = Sampler(sim, clock=clock, host=False)
    clock.t += 1e-3
    sizes: dict[float, int] = {}
    while clock.t < T0 + 26 * HOUR:
        s.step(clock.t)
        clock.t += 120.0
        hour = round((clock.t - T0) / HOUR, 6)
        if hour.is_integer():
            sizes[hour] = s.store.nbytes()
    for h in (1, 6, 12, 24, 25, 26):
        print(f"store after {h:>2} h: {sizes[h] / 2**20:.1f} MiB")
    chunk_slack = 8 * 4 * 2 * CHUNK_ROWS * 3 * 8  # a chunk per stream may be open or freed
    assert abs(sizes[26] - sizes[24]) <= chunk_slack
    assert sizes[26] <= 1.05 * sizes[24] + chunk_slack
    full, buckets, span = rows_by_kind(s.store, 0, "tick")
    assert span <= 24 * HOUR
    assert full <= (HOUR + 10) / 120 + 2 and buckets <= 24 * HOUR / 10 + 1
    assert s.status().ticks == 26 * 30 and s.status().errors <= 8 * 2
    s.stop()


def test_the_store_at_the_native_rates_of_8_gpus_stays_bounded_for_26_hours():
    # per GPU: a tick row every 0.5 s, power every 20 ms, utilisation and memory bandwidth
    # every 200 ms (what NVML's buffers give on an H200), appended 5 minutes at a time
    rates = {"tick": 2.0, "power": 50.0, "util": 5.0, "memutil": 5.0}
    store = Store()
    for gpu in range(8):
        for stream in rates:
            store.declare(gpu, stream, {f"{stream}_v": np.float32})
    sizes = {}
    for block in range(26 * 12):
        t0 = T0 + block * 300.0
        for gpu in range(8):
            for stream, hz in rates.items():
                t = t0 + np.arange(int(300 * hz)) / hz
                store.append_many(gpu, stream, t, {f"{stream}_v": np.ones(len(t), np.float32)})
        if (block + 1) % 12 == 0:
            sizes[(block + 1) // 12] = store.nbytes()
    for h in (1, 6, 12, 24, 25, 26):
        print(f"native-rate store after {h:>2} h: {sizes[h] / 2**20:.1f} MiB")
    slack = 8 * len(rates) * 2 * CHUNK_ROWS * (8 + 3 * 4)
    assert abs(sizes[26] - sizes[24]) <= slack
    for stream, hz in rates.items():
        full, buckets, span = rows_by_kind(store, 0, stream)
        assert full <= hz * (HOUR + 10) + 1, stream
        assert buckets <= 24 * HOUR / 10 + 1, stream
        assert span <= 24 * HOUR
