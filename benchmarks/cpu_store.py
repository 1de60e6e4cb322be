"""Store memory for 24 h at defaults with 8 GPUs, by synthetic appends at the real rates.

The sampler's own store (streams declared by the NVML source over 8 simulated GPUs) is
fed rows on a fake clock: power 50 Hz, utilisation and memory utilisation 5 Hz, the tick
stream 2 Hz (interval 0.5 s) per GPU, and host readings 2 Hz. ``Store.nbytes()`` is read
along the way; the run goes past 24 h to show the figure stops growing.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

from .registry import Context
from .report import Outcome, Target

TARGET_MB = 64.0
# "memory" (the fast memory lane) is written only while a capture or cell profile holds it,
# never at defaults with nothing profiled.
RATES_HZ = {"power": 50.0, "util": 5.0, "memutil": 5.0, "tick": 2.0, "memory": 0.0}
HOST_RATE_HZ = 2.0
BATCH_S = 10.0  # rows go in as 10 s batches (the sampler drains every 0.5 s; the store doesn't care)
QUICK_BATCH_S = 60.0  # --quick: fewer, larger batches (each batch folds a bucket: most of the cost)


def _rows(store, device: object, stream: str, t0: float, t1: float, rate_hz: float, rng) -> None:
    times = np.arange(np.ceil(t0 * rate_hz), np.ceil(t1 * rate_hz)) / rate_hz
    if not len(times):
        return
    cols = store._streams[(device, stream)].columns
    store.append_many(device, stream, times, {c: rng.random(len(times)) * 100 for c in cols})


# When the read of a recent window is timed (seconds of rows kept behind it): the rules and
# the cell summaries read the last seconds, which must cost the same after 1 min or 1 h.
READ_AT_S = (60.0, 3600.0)
READ_SPAN_S = 10.0


def _recent_read_us(store, now: float, repeats: int = 300) -> float:
    """Least µs of ``store.series`` for the last ``READ_SPAN_S`` of GPU 0's power (50 Hz)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        store.series(0, "power_w", now - READ_SPAN_S, now)
        best = min(best, time.perf_counter() - t0)
    return 1e6 * best


def run(ctx: Context) -> Outcome:
    import nbgpu
    from nbgpu.metrics import HOST_KEY

    hours = 25.0
    trace = not ctx.quick  # tracemalloc makes the run ~6x slower: full runs only
    if trace:
        tracemalloc.start()
    sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=8, seed=0))
    store = sampler.store
    streams = {(d, s) for d in store.devices() for s in store.streams_of(d)}
    rng = np.random.default_rng(0)
    start = 1.7e9
    checkpoints = {1: None, 2: None, 6: None, 12: None, 24: None, hours: None}
    peak = 0
    read_us: dict[float, float] = {}
    t0_wall = time.perf_counter()
    t = 0.0
    while t < hours * 3600:
        t1 = t + (QUICK_BATCH_S if ctx.quick else BATCH_S)
        for device, stream in streams:
            rate = HOST_RATE_HZ if device == HOST_KEY else RATES_HZ[stream]
            if rate == 0:
                continue
            _rows(store, device, stream, start + t, start + t1, rate, rng)
        t = t1
        if int(t) % 600 == 0:
            peak = max(peak, store.nbytes())
        for at in READ_AT_S:
            if at not in read_us and t >= at:
                read_us[at] = _recent_read_us(store, start + t)
        for h in checkpoints:
            if checkpoints[h] is None and t >= h * 3600:
                checkpoints[h] = store.nbytes()
    wall = time.perf_counter() - t0_wall
    sampler.stop()
    del rng
    traced_bytes = tracemalloc.get_traced_memory()[0] if trace else float("nan")
    if trace:
        tracemalloc.stop()
    mb = {f"{h:g}h": v / 1e6 for h, v in checkpoints.items()}
    out = Outcome(raw={"gpus": 8, "rates_hz": RATES_HZ, "host_rate_hz": HOST_RATE_HZ,
                       "streams": sorted(f"{d}/{s}" for d, s in streams), "nbytes_mb_at": mb,
                       "peak_mb_sampled_every_10min": peak / 1e6,
                       "full_res_s": store.full_res_s, "bucket_s": store.bucket_s,
                       "history_s": store.history_s, "simulated_hours": hours, "wall_s": wall,
                       "traced_mb_at_end": traced_bytes / 1e6,
                       "recent_read_us_at_s": read_us})
    out.targets.append(Target("store memory at 24 h, 8 GPUs", mb["24h"], "MB", "<=", TARGET_MB))
    out.figure(f"store memory at {hours:g} h", mb[f"{hours:g}h"], "MB")
    out.figure("store memory at 1 h", mb["1h"], "MB")
    first, last = (read_us.get(at, float("nan")) for at in READ_AT_S)
    out.figure(f"read of the last {READ_SPAN_S:g} s of power (50 Hz), after 1 min", first, "µs")
    out.figure(f"the same after 1 h (ratio {last / first:.2f})", last, "µs")
    if trace:
        out.figure(f"all live allocations at {hours:g} h (tracemalloc)", traced_bytes / 1e6, "MB")
    out.notes.append("MB = 10**6 bytes. The target figure is Store.nbytes(): the numpy arrays only. "
                     "The tracemalloc figure also counts the Python objects around them and "
                     "everything else still alive that was allocated while the sampler was built "
                     "and fed.")
    return out
