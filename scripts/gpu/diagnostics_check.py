"""Check the diagnostics rules against real workloads on a real GPU; print what fired.

Run on a machine with an NVIDIA GPU, PyTorch with CUDA and nvidia-ml-py:

    python3 scripts/gpu/diagnostics_check.py --out diagnostics_check.json

Phases, each with its own sampler at default thresholds:
  input_bound  small kernels with CPU work in between (main thread and two busy child
               processes, like DataLoader workers): must raise ``input_bound``.
  oom          memory filled past 95 % of the card and held: must raise ``oom_risk``
               (warning, then critical).
  leak         a list of tensors that grows by 512 MiB each "epoch", one mark per epoch:
               must raise ``memory_leak`` with a rate per epoch close to 512 MiB.
  idle         a "cell" that only sleeps: must raise ``idle``.
  busy         a steady matmul loop: must raise none of the rules above (a near miss).
  imbalance    (two or more GPUs) work on the first GPU only while the second holds
               memory: must raise ``imbalance`` on the second.
The JSON (stdout and ``--out``) lists every alert that fired per phase and whether each
expectation held. The exit status is 0 when all did. Runtime: about two to three minutes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

MiB = 2**20


def burn(stop) -> None:
    """Keep one core busy until told to stop (a stand-in for a DataLoader worker)."""
    x = 0
    while not stop.is_set():
        for i in range(20000):
            x += i * i


def cpu_work(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(2000):
            x += i * i


def alerts_of(sampler) -> list[dict]:
    t0 = sampler.started_at
    return [{"rule": a.rule, "severity": a.severity, "gpu": a.gpu, "start_s": round(a.start - t0, 1),
             "end_s": None if a.end is None else round(a.end - t0, 1),
             "message": a.message, "evidence": a.evidence} for a in sampler.alert_list()]


def wait_for(sampler, rule: str, limit_s: float, step, severity: str | None = None) -> float | None:
    """Run ``step()`` repeatedly until ``rule`` fires (optionally at ``severity``); seconds taken."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        step()
        for a in sampler.alert_list():
            if a.rule == rule and (severity is None or a.severity == severity):
                return round(time.time() - t0, 1)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu_diagnostics_check.json", help="where to write the JSON")
    ap.add_argument("--interval", type=float, default=0.5, help="sampler interval in seconds")
    args = ap.parse_args()

    import torch

    import nbgpu
    from nbgpu.diagnostics import memory_owners
    from nbgpu.diagnostics.owners import framework_memory, nvml_index_of

    if not torch.cuda.is_available():
        print("torch.cuda is not available: this check needs a GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda:0")
    torch.ones(1, device=dev)
    probe = nbgpu.Sampler("nvml", interval=args.interval, diagnostics=False)
    entry = framework_memory()[0]
    gpu = nvml_index_of(entry, probe.devices)
    devices = probe.devices
    probe.stop()
    report: dict = {"device": next((d.name for d in devices if d.key == gpu), "?"),
                    "nvml_gpu": gpu, "gpus": len([d for d in devices if not d.mig]),
                    "torch": torch.__version__, "phases": {}}
    phases = report["phases"]

    def phase(name: str, expected: str, fn, forbid: tuple = ()) -> None:
        sampler = nbgpu.Sampler("nvml", interval=args.interval).start()
        t0 = time.time()
        try:
            extra = fn(sampler) or {}
        finally:
            sampler.stop()
        fired = alerts_of(sampler)
        ok = (expected is None or any(a["rule"] == expected and a["gpu"] == extra.get("gpu", gpu)
                                      for a in fired))
        ok = ok and not any(a["rule"] in forbid for a in fired)
        phases[name] = dict(expected=expected, forbidden=list(forbid), ok=ok,
                            seconds=round(time.time() - t0, 1), fired=fired, **extra)
        print(f"{name}: {'ok' if ok else 'FAILED'} ({[(a['rule'], a['gpu'], a['severity']) for a in fired]})",
              flush=True)

    a = torch.randn(4096, 4096, device=dev, dtype=torch.bfloat16)

    def matmuls(n: int) -> None:
        for _ in range(n):
            a @ a
        torch.cuda.synchronize(dev)

    matmuls(5)
    t = time.perf_counter()
    matmuls(50)
    per = (time.perf_counter() - t) / 50
    reps = max(1, int(0.015 / per))  # about 15 ms of GPU work per step
    report["matmul_ms"] = round(per * 1e3, 3)

    # -- input-bound: GPU work 15 ms, then 45 ms of CPU work, with two busy "workers" --------
    def input_bound(sampler):
        ctx = mp.get_context("spawn")
        stop = ctx.Event()
        workers = [ctx.Process(target=burn, args=(stop,), daemon=True) for _ in range(2)]
        for w in workers:
            w.start()
        try:
            took = wait_for(sampler, "input_bound", 45, lambda: (matmuls(reps), cpu_work(0.045)))
        finally:
            stop.set()
            for w in workers:
                w.join(5)
        return {"fired_after_s": took, "owners": str(memory_owners(sampler)),
                "owners_status": memory_owners(sampler).status}

    phase("input_bound", "input_bound", input_bound, forbid=("oom_risk", "memory_leak"))

    # -- OOM risk: fill the card past 95 % and hold it -------------------------------------
    def oom(sampler):
        held = []
        free, total = torch.cuda.mem_get_info(dev)
        target_free = total * 0.03
        chunk = 1024 * MiB
        while free > target_free:
            size = int(min(chunk, free - target_free))
            if size < 64 * MiB:
                break
            try:
                held.append(torch.empty(size, dtype=torch.uint8, device=dev))
            except torch.cuda.OutOfMemoryError:
                break
            free, total = torch.cuda.mem_get_info(dev)
        used_fraction = 1 - free / total
        warn = wait_for(sampler, "oom_risk", 15, lambda: time.sleep(0.2))
        crit = wait_for(sampler, "oom_risk", 25, lambda: time.sleep(0.2), severity="critical")
        del held
        torch.cuda.empty_cache()
        return {"used_fraction": round(used_fraction, 4), "warning_after_s": warn,
                "critical_after_s": crit, "critical": crit is not None}

    phase("oom", "oom_risk", oom, forbid=("input_bound",))
    if not phases["oom"].get("critical"):
        phases["oom"]["ok"] = False

    # -- leak: +512 MiB kept per epoch, a mark per epoch --------------------------------------
    def leak(sampler):
        kept, step = [], 512 * MiB
        epoch_s = 2.5
        for epoch in range(9):
            sampler.mark(f"epoch {epoch}")
            kept.append(torch.empty(step, dtype=torch.uint8, device=dev).fill_(1))
            end = time.time() + epoch_s
            while time.time() < end:
                matmuls(max(1, reps // 3))
                time.sleep(0.02)
            if any(a.rule == "memory_leak" for a in sampler.alert_list()) and epoch >= 5:
                break
        sampler.mark("end")
        time.sleep(1.5)
        found = [a for a in sampler.alert_list() if a.rule == "memory_leak"]
        per = found[0].evidence.get("per_mark_bytes") if found else None
        del kept
        torch.cuda.empty_cache()
        return {"real_growth_bytes_per_epoch": step, "reported_bytes_per_epoch": per,
                "rate_error": None if per is None else round(abs(per - step) / step, 3)}

    phase("leak", "memory_leak", leak, forbid=("input_bound", "oom_risk"))
    err = phases["leak"].get("rate_error")
    if err is None or err > 0.1:
        phases["leak"]["ok"] = False

    # -- idle: a "cell" that waits ------------------------------------------------------------
    def idle(sampler):
        sampler.diagnostics.cell_running(True)
        try:
            took = wait_for(sampler, "idle", 25, lambda: time.sleep(0.2))
        finally:
            sampler.diagnostics.cell_running(False)
        return {"fired_after_s": took}

    phase("idle", "idle", idle, forbid=("input_bound", "oom_risk", "memory_leak"))

    # -- busy: steady matmuls, nothing about input, idle, memory may fire ---------------------
    def busy(sampler):
        sampler.diagnostics.cell_running(True)
        end = time.time() + 20
        while time.time() < end:
            matmuls(reps)
        sampler.diagnostics.cell_running(False)
        return {}

    phase("busy", None, busy, forbid=("input_bound", "idle", "oom_risk", "memory_leak"))

    # -- imbalance: work on the first GPU only while the second holds memory ------------------
    if torch.cuda.device_count() >= 2:
        other = torch.device("cuda:1")
        parked = torch.ones(256 * MiB, dtype=torch.uint8, device=other)
        other_gpu = nvml_index_of(framework_memory()[1], devices)

        def imbalance(sampler):
            took = wait_for(sampler, "imbalance", 40, lambda: matmuls(reps))
            return {"fired_after_s": took, "gpu": other_gpu}

        phase("imbalance", "imbalance", imbalance, forbid=("oom_risk",))
        del parked
    else:
        phases["imbalance"] = {"skipped": "one GPU only"}

    report["all_ok"] = all(p.get("ok", True) for p in phases.values())
    text = json.dumps(report, indent=2, default=str)
    with open(args.out, "w") as f:
        f.write(text)
    print(text)
    return 0 if report["all_ok"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
