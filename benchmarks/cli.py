"""Command line of ``python -m benchmarks``: choose, run, print the table, write the JSON."""

from __future__ import annotations

import argparse
import gc
import itertools
import time
import traceback
from pathlib import Path

from . import REPO_ROOT
from .env import command_line, device_slug, host_info, package_versions, probe_gpus, utc_now
from .registry import Context, all_benchmarks
from .report import UnavailableError, outcome_json, table, write

SCHEMA = 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks",
                                description="Measure nbgpu's overhead, resolution, accuracy and costs.")
    p.add_argument("--quick", action="store_true",
                   help="fewer and shorter repeats (CI smoke run; figures are rougher)")
    p.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "results",
                   help="folder for <device>-<date>.json (default: benchmarks/results/)")
    p.add_argument("--only", default="", help="comma-separated benchmark names to run")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("--markdown", type=Path, metavar="RESULTS_JSON",
                   help="print a results file as a Markdown table and exit")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns 0 when the run completed (missed targets included), 2 on bad use."""
    args = parse_args(argv)
    if args.markdown:
        from .markdown import render

        print(render(args.markdown))
        return 0
    benches = all_benchmarks()
    if args.list:
        for b in benches:
            print(f"{b.name:22} {b.part:4} {b.about}")
        return 0
    wanted = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(wanted) - {b.name for b in benches})
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; see `python -m benchmarks --list`")
        return 2
    if wanted:
        benches = [b for b in benches if b.name in wanted]

    started = utc_now()
    gpus = probe_gpus()
    ctx = Context(quick=args.quick, gpus=gpus)
    results: dict[str, dict] = {}
    for b in benches:
        print(f"[{time.strftime('%H:%M:%S')}] {b.name}: {b.about}", flush=True)
        t0 = time.perf_counter()
        if b.part == "gpu" and not gpus.usable:
            results[b.name] = outcome_json("skipped", 0.0, None, f"no usable GPU: {gpus.reason}")
            continue
        try:
            outcome = b.run(ctx)
            results[b.name] = outcome_json("ok", time.perf_counter() - t0, outcome)
        except UnavailableError as exc:
            results[b.name] = outcome_json("skipped", time.perf_counter() - t0, None, str(exc))
        except Exception as exc:
            traceback.print_exc()
            results[b.name] = outcome_json("error", time.perf_counter() - t0, None,
                                           f"{type(exc).__name__}: {exc}")
        gc.collect()
    finished = utc_now()

    targets = [dict(t, benchmark=name) for name, rec in results.items() for t in rec.get("targets", [])]
    document = {
        "schema": SCHEMA,
        "device": ", ".join(gpus.names) if gpus.usable else "no GPU (CPU only)",
        "driver": gpus.driver or None,
        "nvml_version": gpus.nvml_version or None,
        "cuda_runtime": gpus.cuda_runtime or None,
        "gpu_count": len(gpus.names) if gpus.usable else 0,
        "gpu_reason": gpus.reason or None,
        "command": command_line(),
        "quick": args.quick,
        "started_utc": started.isoformat(timespec="seconds"),
        "finished_utc": finished.isoformat(timespec="seconds"),
        "wall_s": round((finished - started).total_seconds(), 1),
        "host": host_info(),
        "packages": package_versions(),
        "targets": targets,
        "benchmarks": results,
    }
    stem = f"{device_slug(gpus)}-{started.date().isoformat()}{'-quick' if args.quick else ''}"
    path = next(p for n in itertools.count(1)  # a run never overwrites an earlier run's file
                if not (p := args.out / f"{stem}{'' if n == 1 else f'-{n}'}.json").exists())
    write(path, document)
    print()
    print(table(results))
    missed = [f"{t['benchmark']}: {t['name']}" for t in targets if t["met"] is False]
    print(f"\n{len(targets)} targets, {sum(1 for t in targets if t['met'])} met, "
          f"{len(missed)} missed{': ' + '; '.join(missed) if missed else ''}")
    print(f"wrote {path}")
    return 0
