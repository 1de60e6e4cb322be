"""On a real GPU: does nbgpu.capture() catch a 16 GiB tensor allocated and freed within ~80 ms?

Prints and writes JSON (device, driver, command, the summary's peak and where it came from,
torch.cuda.max_memory_allocated/reserved) to ``--out``. Needs torch with CUDA and nvidia-ml-py.

    python scripts/gpu/transient_peak.py --out benchmarks/results/transient_peak_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--gib", type=float, default=16.0, help="tensor size in GiB (default 16)")
    parser.add_argument("--hold-s", type=float, default=0.08, help="how long the tensor lives")
    parser.add_argument("--no-allocator", action="store_true",
                        help="hide torch from the capture (NVML samples alone)")
    args = parser.parse_args()

    import numpy as np
    import pynvml
    import torch

    import nbgpu
    from nbgpu.units import GIB, fmt_bytes

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # CUDA context before the block, as in a notebook
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    device = pynvml.nvmlDeviceGetName(handle)
    driver = pynvml.nvmlSystemGetDriverVersion()
    sampler = nbgpu.Sampler("nvml", interval=0.5, gpus=[0]).start()
    time.sleep(1.0)
    hidden = sys.modules.pop("torch") if args.no_allocator else None
    try:
        with nbgpu.capture(sampler=sampler) as cap:
            x = torch.empty(int(args.gib * GIB), dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
            time.sleep(args.hold_s)
            del x
            torch.cuda.empty_cache()
            torch.cuda.synchronize()
            time.sleep(0.2)
    finally:
        if hidden is not None:
            sys.modules["torch"] = hidden
    row = cap.summary_rows[0]
    t, v = cap.timeline.series(0, "mem_used_bytes")
    result = {
        "device": device, "driver": driver, "command": " ".join(sys.argv),
        "tensor_bytes": int(args.gib * GIB), "hold_s": args.hold_s,
        "allocator_visible": not args.no_allocator,
        "duration_s": row["duration_s"],
        "mem_start_bytes": row["mem_start_bytes"], "mem_end_bytes": row["mem_end_bytes"],
        "mem_peak_bytes": row["mem_peak_bytes"], "mem_peak_source": row["mem_peak_source"],
        "nvml_peak_bytes": float(v.max()) if len(v) else None,
        "nvml_memory_reads": len(t),
        "nvml_read_spacing_median_s": float(np.median(np.diff(t))) if len(t) > 2 else None,
        "torch_max_memory_allocated_bytes": int(torch.cuda.max_memory_allocated(0)),
        "torch_max_memory_reserved_bytes": int(torch.cuda.max_memory_reserved(0)),
        "one_line": cap.one_line(),
        "caught": row["mem_peak_bytes"] - row["mem_start_bytes"] >= 0.9 * args.gib * GIB,
    }
    sampler.stop()
    print(json.dumps(result, indent=2, default=str))
    print(f"peak {fmt_bytes(result['mem_peak_bytes'])} from {result['mem_peak_source']}; "
          f"NVML alone {fmt_bytes(result['nvml_peak_bytes'])} over {result['nvml_memory_reads']} reads")
    with open(args.out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=2, default=str)
    return 0 if result["caught"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
