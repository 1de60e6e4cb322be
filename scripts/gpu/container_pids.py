"""On a GPU machine: who uses the GPU, seen from inside a new PID namespace.

    python3 scripts/gpu/container_pids.py --out container-pids.json

Runs one inner process three ways: as is, under ``unshare --pid --fork --mount-proc`` (a
container's view: NVML lists host PIDs no process here has, so only memory can match them)
and under ``unshare --pid --fork`` (the /proc of the machine stays mounted; where that is the
host's, this process's PID there is NVML's). Each inner run puts 2 GiB on the first GPU with
torch, starts an nbgpu NVML sampler and writes what ``memory_owners`` and ``who_uses`` say,
and ``found_by``: "pid" or the match ("matched by memory, 2.5 GiB"). Where ``unshare`` is
missing or not permitted, the JSON says so for that way (``"permitted": false``, the error)
and its checks are null. ``checks`` per way: this kernel found, holding NVML's figure for
its PID, and the panel's users line naming it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

WAYS = {"as_is": [], "unshare_mount_proc": ["unshare", "--pid", "--fork", "--mount-proc"],
        "unshare_host_proc": ["unshare", "--pid", "--fork"]}


def inner(out: str) -> None:
    """In this process: 2 GiB on cuda:0, an NVML sampler, and what nbgpu says of who holds memory."""
    import torch

    import nbgpu
    from nbgpu.diagnostics.owners import memory_owners, users_line, who_uses

    block = torch.empty(2 << 30, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    s = nbgpu.Sampler("nvml", interval=0.2).start()
    try:
        deadline = time.time() + 15
        while not any(s.processes().values()) and time.time() < deadline:
            s.request("procs")
            time.sleep(0.2)
        owners = memory_owners(s)
        usage = who_uses(s)
        with open("/proc/self/status") as fh:
            status = fh.read()
        result = {
            "pid_here": os.getpid(),
            "nspid": next((ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), []),
            "proc_self": os.readlink("/proc/self"),
            "torch_reserved_bytes": torch.cuda.memory_reserved(0),
            "listed": {str(g): [[p.pid, p.used_bytes] for p in procs] for g, procs in s.processes().items()},
            "status": owners.status, "rows": owners.rows, "notes": owners.notes,
            "users_lines": {str(g): users_line(u) for g, u in usage.items()},
        }
    finally:
        s.stop()
    del block
    with open(out, "w") as f:
        json.dump(result, f, indent=1, default=str)


def checks(got: dict) -> dict:
    """Whether this kernel was found (by its PID or a match), holding NVML's figure for its PID."""
    mine = [r for r in got.get("rows", []) if r.get("who") == "this kernel"]
    listed = {pid: used for procs in got.get("listed", {}).values() for pid, used in procs}
    return {"kernel_found": bool(mine),
            "kernel_bytes_are_nvmls": bool(mine) and all(listed.get(r["pid"]) == r["used_bytes"]
                                                         for r in mine),
            "users_line_names_this_kernel": any(v.startswith("this kernel") for v in
                                                got.get("users_lines", {}).values())}


def found_by(got: dict) -> str:
    """How this kernel was found: "pid" (NVML's PID is ours here) or the match ("matched by ...")."""
    mine = [r for r in got.get("rows", []) if r.get("who") == "this kernel"]
    return (mine[0].get("matched") or "pid") if mine else ""


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--inner", action="store_true", help="(internal) the measured process")
    args = ap.parse_args()
    if args.inner:
        inner(args.out)
        return 0
    result: dict = {"command": "python3 " + " ".join(sys.argv), "t": time.time(), "ways": {}}
    for way, prefix in WAYS.items():
        with tempfile.TemporaryDirectory() as tmp:
            target = os.path.join(tmp, "inner.json")
            cmd = [*prefix, sys.executable, os.path.abspath(__file__), "--inner", "--out", target]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                rc, err = proc.returncode, proc.stderr[-3000:]
            except (OSError, subprocess.TimeoutExpired) as exc:
                rc, err = None, str(exc)
            got = {}
            if os.path.exists(target):
                with open(target) as fh:
                    got = json.load(fh)
        # unshare itself refused, or CUDA refusing to start in the new namespace (a PID
        # namespace that still sees the host's /proc: cudaGetDeviceCount fails with error 304)
        refused = bool(prefix) and not got and (
            rc is None or "unshare:" in err or "cudaGetDeviceCount" in err)
        entry = {"command": " ".join(prefix) or "(none)", "rc": rc, "permitted": not refused,
                 "found_by": found_by(got), "result": got, "checks": checks(got) if got else None}
        if not got:
            entry["error"] = err
            entry["note"] = ("this way could not run here (unshare refused or missing, or CUDA would not "
                             "start in the new PID namespace), so it was not measured" if refused
                             else "the inner run failed")
        result["ways"][way] = entry
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(json.dumps({w: {k: e[k] for k in ("command", "rc", "permitted", "found_by", "checks") if k in e}
                      | ({"note": e["note"]} if "note" in e else {})
                      for w, e in result["ways"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
