"""On a GPU machine: a real kernel runs a cell into torch.OutOfMemoryError, then asks
``nbgpu.memory_by_name()`` who holds the memory and ``%gpumon free`` to give it back.

    python3 scripts/gpu/memory_by_name_oom.py --out memory-by-name.json

Writes the table, the sums against ``torch.cuda.memory_allocated()`` and NVML's used memory
before the cell, after the OOM and after the release, with the device and driver.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from jupyter_client.manager import start_new_kernel

CELLS = {
    "setup": """
import json, torch, pynvml
pynvml.nvmlInit()
_h = pynvml.nvmlDeviceGetHandleByIndex(0)
def nvml_used():
    return pynvml.nvmlDeviceGetMemoryInfo(_h).used
torch.zeros(1, device="cuda")
before_used = nvml_used()
print(json.dumps({"before_used": before_used,
                  "device": pynvml.nvmlDeviceGetName(_h),
                  "driver": pynvml.nvmlSystemGetDriverVersion()}))
""",
    "load": "%load_ext nbgpu",
    "oom": """
blocks = []
def fill():
    chunk = []
    while True:
        chunk.append(torch.empty(8 << 30, dtype=torch.uint8, device="cuda"))
        blocks.append(chunk[-1])
fill()
""",
    "table": """
import nbgpu
table = nbgpu.memory_by_name(device="cuda")
print(json.dumps({"after_oom_used": nvml_used(),
                  "allocated": torch.cuda.memory_allocated(),
                  "reserved": torch.cuda.memory_reserved(),
                  "table": json.loads(table.to_json(orient="records"))}))
del table
""",
    "free": "%gpumon free blocks --traceback",
    "after": """print(json.dumps({"after_free_used": nvml_used(),
                  "allocated_after": torch.cuda.memory_allocated()}))""",
}


def run(kc, code: str) -> tuple[list[str], str]:
    msg_id = kc.execute(code)
    out: list[str] = []
    status = "ok"
    while True:
        msg = kc.get_iopub_msg(timeout=300)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "error":
            status = content["ename"]
        elif kind == "status" and content["execution_state"] == "idle":
            return out, status


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    km, kc = start_new_kernel()
    result: dict = {"command": "python3 " + " ".join(sys.argv), "t": time.time(), "cells": {}}
    try:
        for name, code in CELLS.items():
            out, status = run(kc, code)
            result["cells"][name] = {"status": status, "stdout": "".join(out)[-20000:]}
            for line in "".join(out).splitlines():
                if line.startswith("{"):
                    try:
                        result.update(json.loads(line))
                    except ValueError:
                        pass
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    rows = result.get("table", [])
    counted: set[str] = set()
    named = 0  # a row whose storages another counted row already holds is not counted twice
    for r in rows:
        name = str(r.get("name", ""))
        if name.startswith(("not reachable", "reserved")):
            continue
        partners = {p.strip() for p in str(r.get("shared_with") or "").split(",") if p.strip()}
        if partners & counted and r.get("bytes") == next(
                (q.get("bytes") for q in rows if q.get("name") in partners & counted), None):
            continue
        counted.add(name)
        named += r.get("bytes", 0) or 0
    unreachable = sum(r.get("bytes", 0) or 0 for r in rows
                      if str(r.get("name", "")).startswith("not reachable"))
    alloc = result.get("allocated") or 0
    result["named_plus_unreachable_vs_allocated_pct"] = (
        100.0 * (named + unreachable - alloc) / alloc if alloc else None)
    if "after_free_used" in result and "before_used" in result:
        result["after_free_minus_before_gib"] = (
            (result["after_free_used"] - result["before_used"]) / 2**30)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "cells"}, indent=1)[:6000])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
