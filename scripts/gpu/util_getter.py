"""What ``nvmlDeviceGetUtilizationRates`` reports, against the utilisation sample buffer.

A matmul load switches on and off every ``--period`` seconds on GPU 0 while a thread reads the
getter every 50 ms. Afterwards the buffer is drained; each getter reading is compared with
(a) the newest buffer sample at its time and (b) the mean of the buffer samples of the last
1 s. The smaller error says which window the getter reports.

    python scripts/gpu/util_getter.py --out util-getter.json [--seconds 10] [--period 0.7]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--period", type=float, default=0.7)
    a = ap.parse_args()
    import pynvml as nv
    import torch

    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(0)
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    stop = threading.Event()
    got: list[tuple[float, float, float]] = []

    def poll() -> None:
        while not stop.is_set():
            r = nv.nvmlDeviceGetUtilizationRates(h)
            got.append((time.time(), r.gpu, r.memory))
            time.sleep(0.05)

    t0_us = int(time.time() * 1e6)
    th = threading.Thread(target=poll)
    th.start()
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        on_until = time.monotonic() + a.period
        while time.monotonic() < on_until:
            x @ x
            torch.cuda.synchronize()
        time.sleep(a.period)
    stop.set()
    th.join()
    _, samples = nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES, t0_us)
    bt = np.array([s.timeStamp / 1e6 for s in samples])
    bv = np.array([float(s.sampleValue.uiVal) for s in samples])
    rows = []
    for t, g, _m in got:
        i = np.searchsorted(bt, t) - 1
        if i < 5:
            continue
        last1 = bv[(bt > t - 1.0) & (bt <= t)]
        rows.append((g, bv[i], float(last1.mean()) if len(last1) else np.nan))
    r = np.array(rows)
    out = {"command": "python scripts/gpu/util_getter.py " + " ".join(f"--{k} {v}" for k, v in vars(a).items()
                                                                       if k != "out"),
           "device": nv.nvmlDeviceGetName(h), "driver": nv.nvmlSystemGetDriverVersion(),
           "buffer_samples": len(bt), "buffer_spacing_ms": float(np.median(np.diff(bt)) * 1e3),
           "getter_reads": len(got),
           "getter_distinct_values_per_s": float(np.sum(np.diff([g for _, g, _ in got]) != 0) / a.seconds),
           "mean_abs_diff_vs_newest_sample": float(np.nanmean(np.abs(r[:, 0] - r[:, 1]))),
           "mean_abs_diff_vs_mean_last_1s": float(np.nanmean(np.abs(r[:, 0] - r[:, 2]))),
           "first_rows": [[float(v) for v in row] for row in r[:40]]}
    a.out.write_text(json.dumps(out, indent=1))
    print({k: v for k, v in out.items() if k != "first_rows"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
