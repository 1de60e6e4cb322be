"""Where the main thread was, on a real GPU: each workload runs 3 s in a capture and its
``cap.where()`` split is written as JSON, beside the category it should be held by.

    python3 scripts/gpu/stack_classes.py --out "$OUT/stack-classes.json"

Workloads: ``.item()`` every step of small matmuls, ``torch.cuda.synchronize()`` after big
ones, copies from pageable host memory, a loop of tiny kernels, a slow ``Dataset`` under a
``DataLoader``, ``time.sleep``, numpy. Without CUDA the GPU workloads are skipped (noted).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

SECONDS = 3.0


def workloads(cuda: bool) -> dict:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    dev = "cuda" if cuda else "cpu"

    class Slow(Dataset):
        def __len__(self):
            return 10**7

        def __getitem__(self, i):
            a = np.random.default_rng(i).random((150, 150))
            return torch.tensor((a @ a)[:8, :8], dtype=torch.float32), i

    def until(step):
        end = time.monotonic() + SECONDS
        while time.monotonic() < end:
            step()

    def item_loop():
        x = torch.rand(512, 512, device=dev)
        until(lambda: (x @ x).sum().item())

    def sync_loop():
        x = torch.rand(8192, 8192, device=dev, dtype=torch.bfloat16)

        def step():
            for _ in range(8):
                x @ x
            torch.cuda.synchronize()
        until(step)

    def h2d_loop():
        host = torch.rand(64 * 1024 * 1024 // 4)  # 64 MiB of pageable memory
        until(lambda: host.to(dev))

    def tiny_kernels():
        x = torch.rand(64, device=dev)

        def step():
            for _ in range(100):
                x.mul_(1.0001).add_(1e-6)
        until(step)

    def loader():
        it = iter(DataLoader(Slow(), batch_size=16, num_workers=0))
        until(lambda: next(it)[0].to(dev, non_blocking=True))

    def numpy_loop():
        a = np.random.default_rng(0).random((300, 300))
        until(lambda: a @ a)

    gpu_only = {"item every step": (item_loop, "gpu_wait"), "synchronize": (sync_loop, "gpu_wait"),
                "pageable copies": (h2d_loop, "h2d_copy"), "tiny kernels": (tiny_kernels, "gpu_issue")}
    anywhere = {"data loader": (loader, "data_loader"), "sleep": (lambda: time.sleep(SECONDS), "idle"),
                "numpy": (numpy_loop, "cpu")}
    return {**(gpu_only if cuda else {}), **anywhere}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "stack-classes.json")
    args = ap.parse_args()
    import torch

    import nbgpu

    cuda = torch.cuda.is_available()
    source = "auto" if cuda else "sim"
    sampler = nbgpu.Sampler(source).start()
    rows = {}
    try:
        for name, (fn, expected) in workloads(cuda).items():
            with nbgpu.capture(sampler=sampler) as cap:
                fn()
            where = cap.where()
            shares = {r.category: round(float(r.share), 3) for r in where.itertuples()}
            top = max(shares, key=shares.get)
            rows[name] = {"expected": expected, "top": top, "ok": top == expected, "shares": shares,
                          "top_line": where.attrs["top_line"], "samples": where.attrs["samples"],
                          "findings": [a.message for a in cap.alerts]}
            print(f"{name:18} expected {expected:11} got {top:11} {shares}", flush=True)
    finally:
        sampler.stop()
    doc = {"device": torch.cuda.get_device_name(0) if cuda else "none (GPU workloads skipped)",
           "driver": sampler.status().source_description, "command": "python3 scripts/gpu/stack_classes.py",
           "workloads": rows, "all_ok": all(r["ok"] for r in rows.values())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, default=str))
    print(f"wrote {args.out}; all as expected: {doc['all_ok']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
