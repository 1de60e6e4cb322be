"""Who is using the GPU, on a real card: a child process holds ~2 GiB through torch.

Prints and writes (``--out F.json``) the per-GPU summary nbgpu gives (this kernel and its
children, this user elsewhere, others), with NVML's own process list, the device names and
the driver. ``--source sim`` runs the same path on simulated GPUs (no torch, the child is
listed by the simulator), to check the script without a GPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time

CHILD = """
import sys, time, torch
x = torch.empty(int(sys.argv[1]), dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(120)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--source", default="nvml", choices=["nvml", "sim"])
    ap.add_argument("--gib", type=float, default=2.0, help="GiB the child holds")
    args = ap.parse_args()
    import nbgpu
    from nbgpu.diagnostics.owners import users_line, who_uses

    size = int(args.gib * 2**30)
    code = CHILD if args.source == "nvml" else "import time; print('ready', flush=True); time.sleep(120)"
    child = subprocess.Popen([sys.executable, "-c", code, str(size)], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready", "the child did not allocate its memory"
        source: object = "nvml"
        if args.source == "sim":
            source = nbgpu.SimulatedGPUs(count=1)
            source.add_process(0, child.pid, size)
        with nbgpu.Sampler(source, interval=0.5, procs_every_s=0.5) as s:
            deadline = time.time() + 20
            while time.time() < deadline and not any(
                    p.pid == child.pid for ps in s.processes().values() for p in ps):
                time.sleep(0.2)
            listed = s.processes()
            usage = who_uses(s)
            status = s.status()
            devices = [{"key": str(d.key), "name": d.name} for d in s.devices]
        driver = None
        if args.source == "nvml":
            import pynvml

            pynvml.nvmlInit()
            try:
                driver = pynvml.nvmlSystemGetDriverVersion()
            finally:
                pynvml.nvmlShutdown()
        result = {
            "command": " ".join(sys.argv), "source": status.source_description, "driver": driver,
            "devices": devices, "child_pid": child.pid, "child_bytes_asked": size,
            "nvml_processes": {str(g): [dataclasses.asdict(p) for p in ps] for g, ps in listed.items()},
            "summary": {str(g): {**dataclasses.asdict(u), "gpu": str(g), "line": users_line(u)}
                        for g, u in usage.items()},
            "child_seen": any(p.pid == child.pid for ps in listed.values() for p in ps),
        }
    finally:
        child.kill()
        child.wait()
    text = json.dumps(result, indent=2, default=str)
    print(text)
    with open(args.out, "w") as fh:
        fh.write(text + "\n")
    for g, u in result["summary"].items():
        print(f"GPU {g}: {u['line']}", file=sys.stderr)
    return 0 if result["child_seen"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
