"""On a GPU machine: a real kernel runs a ``%%gpumon`` cell into torch.OutOfMemoryError, then
asks ``nbgpu.memory_by_name()`` who holds the memory and ``%gpumon free`` to give it back.

    python3 scripts/gpu/memory_by_name_oom.py --out memory-by-name.json
    python3 scripts/gpu/memory_by_name_oom.py --out dry.json --cpu   # anywhere: CPU tensors, a raised OOM

Writes the post-mortem's text, the table, the sums against ``torch.cuda.memory_allocated()``
and NVML's used memory before the cell, after the OOM and after the release, with the device
and driver, and ``checks``: what issue 29 asks, each true or false (``tests/test_memory_gpu.py``
runs this script and asserts them). ``--cpu`` runs the same cells on CPU tensors with the OOM
raised by hand, so the script itself can be tried without a GPU (its NVML figures are 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from jupyter_client.manager import start_new_kernel

GIB = 2**30

SETUP_GPU = """
import json, torch, pynvml
pynvml.nvmlInit()
_h = pynvml.nvmlDeviceGetHandleByIndex(0)
def nvml_used():
    return pynvml.nvmlDeviceGetMemoryInfo(_h).used
torch.zeros(1, device="cuda")
DEVICE = "cuda"
before_used = nvml_used()
print(json.dumps({"before_used": before_used, "device": pynvml.nvmlDeviceGetName(_h),
                  "driver": pynvml.nvmlSystemGetDriverVersion()}))
"""
SETUP_CPU = """
import json, torch, nbgpu.holders
nbgpu.holders.cuda_device = lambda *a, **k: "cpu"  # CPU tensors stand for CUDA ones
def nvml_used():
    return 0
DEVICE = "cpu"
before_used = 0
print(json.dumps({"before_used": 0, "device": "cpu (dry run)", "driver": ""}))
"""
OOM_GPU = """%%gpumon
blocks = []
def fill():
    chunk = []
    while True:
        chunk.append(torch.empty(8 << 30, dtype=torch.uint8, device="cuda"))
        blocks.append(chunk[-1])
fill()
"""
OOM_CPU = """%%gpumon --source sim
blocks = []
def fill():
    chunk = []
    for _ in range(17):
        chunk.append(torch.empty(1 << 20, dtype=torch.uint8))
        blocks.append(chunk[-1])
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB.")
fill()
"""
TABLE = """
import nbgpu
table = nbgpu.memory_by_name(device=DEVICE)
print(json.dumps({"after_oom_used": nvml_used(),
                  "allocated": torch.cuda.memory_allocated() if DEVICE == "cuda" else None,
                  "reserved": torch.cuda.memory_reserved() if DEVICE == "cuda" else None,
                  "named_bytes": table.attrs["named_bytes"], "freed_by": table.attrs["freed_by"],
                  "table": json.loads(table.to_json(orient="records"))}))
del table
"""
AFTER = """print(json.dumps({"after_free_used": nvml_used(),
                  "allocated_after": torch.cuda.memory_allocated() if DEVICE == "cuda" else None}))"""


def cells(cpu: bool) -> dict[str, str]:
    """The cells in order: set-up, load, the OOM cell, the table, the release, the figures after."""
    return {"setup": SETUP_CPU if cpu else SETUP_GPU, "load": "%load_ext nbgpu",
            "oom": OOM_CPU if cpu else OOM_GPU, "table": TABLE, "free": "%gpumon free blocks --traceback",
            "after": AFTER}


def run(kc, code: str) -> tuple[list[str], list[str], str]:
    """Execute ``code``: (its stdout pieces, its displays' plain text, its status or error name)."""
    msg_id = kc.execute(code)
    out: list[str] = []
    shown: list[str] = []
    status = "ok"
    while True:
        msg = kc.get_iopub_msg(timeout=300)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "display_data":
            shown.append(content["data"].get("text/plain", ""))
        elif kind == "error":
            status = content["ename"]
        elif kind == "status" and content["execution_state"] == "idle":
            return out, shown, status


def checks(result: dict) -> dict:
    """What issue 29 asks of the run, each true or false (None: not measurable in a dry run)."""
    rows = result.get("table", [])
    names = {str(r.get("name")) for r in rows}
    unreachable = sum(r.get("bytes") or 0 for r in rows if str(r.get("name")).startswith("not reachable"))
    alloc = result.get("allocated")
    story = result.get("post_mortem", "")
    out = {"table_names_blocks": "blocks" in names,
           "table_names_the_traceback": any(n.endswith("(traceback)") for n in names),
           "post_mortem_names_blocks": "`blocks`: list of 17 tensors" in story,
           "post_mortem_says_what_free_traceback_gives": "%gpumon free" in story and "--traceback" in story,
           "named_plus_unreachable_within_1pct_of_allocated": None,
           "free_returns_nvml_used_within_1gib_of_before": None}
    if alloc:
        total = (result.get("named_bytes") or 0) + unreachable
        result["named_plus_unreachable_vs_allocated_pct"] = 100.0 * (total - alloc) / alloc
        out["named_plus_unreachable_within_1pct_of_allocated"] = abs(total - alloc) <= 0.01 * alloc
    if alloc and "after_free_used" in result:
        result["after_free_minus_before_gib"] = (result["after_free_used"] - result["before_used"]) / GIB
        back = abs(result["after_free_minus_before_gib"]) <= 1.0
        out["free_returns_nvml_used_within_1gib_of_before"] = back
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", action="store_true", help="CPU tensors, a raised OOM: try the script anywhere")
    args = ap.parse_args()
    km, kc = start_new_kernel()
    result: dict = {"command": "python3 " + " ".join(sys.argv), "t": time.time(), "cells": {}}
    try:
        for name, code in cells(args.cpu).items():
            out, shown, status = run(kc, code)
            result["cells"][name] = {"status": status, "stdout": "".join(out)[-20000:]}
            if name == "oom":
                result["post_mortem"] = next((s for s in shown if s.startswith("GPU out of memory")), "")
            for line in "".join(out).splitlines():
                if line.startswith("{"):
                    try:
                        result.update(json.loads(line))
                    except ValueError:
                        pass
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    result["checks"] = checks(result)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k not in ("cells", "table")}, indent=1)[:6000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
