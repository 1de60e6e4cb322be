"""What one panel refresh costs at defaults (1 GPU, interval 1 s, refresh 1 s), warm and live.

The panel benchmark (``benchmarks.cpu_widgets.refresh_cost``) calls refreshes back to back,
so the refresh's code and data stay in cache. A live panel refreshes once a second beside
the user's loop, and what it costs the loop is what it costs then. This runs, each in a
fresh interpreter and alternated over rounds, on one simulated GPU at defaults:

- ``warm``: ``refresh_cost`` (refreshes back to back), and the share of a refresh spent
  sending its widget messages (``sync.send_values``, under cProfile);
- ``live_idle`` / ``live_busy``: a panel on its own timer over a running sampler, the main
  thread sleeping or spinning a Python loop: CPU per refresh and per second of each thread;
- ``after_tick_busy``: the same refresh run from the sampler's thread after each tick
  instead of from the panel timer (one wake-up a second instead of two), main thread busy;
- ``sampler_busy``: the sampler alone, main thread busy (what the others add to).

    python scripts/panel_cold_refresh.py --out results.json [--seconds 15] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("warm", "live_idle", "live_busy", "after_tick_busy", "sampler_busy")


def _warm() -> dict:
    import cProfile
    import pstats

    import benchmarks.cpu_widgets as cw
    import nbgpu.widgets.monitor as monitor

    cw.REFRESH_GPUS, cw.REFRESH_INTERVAL_S = 1, 1.0
    res = cw.refresh_cost(60.0, 100)
    prof = cProfile.Profile()
    plain = monitor.GPUMonitor.refresh

    def profiled(self, *args, **kwargs):
        if args or kwargs:  # the first, forced draw is not steady state
            return plain(self, *args, **kwargs)
        prof.enable()
        try:
            return plain(self, *args, **kwargs)
        finally:
            prof.disable()

    monitor.GPUMonitor.refresh = profiled
    cw.refresh_cost(60.0, 100)
    stats = pstats.Stats(prof).stats  # (file, line, name) -> (cc, nc, tottime, cumtime, callers)

    def cumtime(file_end: str, name: str) -> float:
        return sum(row[3] for (file, _, fn), row in stats.items()
                   if fn == name and file.replace(os.sep, "/").endswith(file_end))

    share = cumtime("widgets/sync.py", "send_values") / cumtime("widgets/monitor.py", "refresh")
    return {"cpu_ms_median": res["cpu_ms_median"], "cpu_ms_mean": res["cpu_ms_mean"],
            "messages_per_refresh": res["messages_per_refresh"], "send_share_profiled": share}


def _live(mode: str, seconds: float) -> dict:
    import threading

    import nbgpu
    import nbgpu.widgets.monitor as monitor
    from benchmarks.comm_recorder import install
    from benchmarks.panel_driver import prefill

    install()
    per_refresh: list[float] = []
    plain = monitor.GPUMonitor.refresh

    def timed(self, *args, **kwargs):
        c0 = time.thread_time()
        try:
            return plain(self, *args, **kwargs)
        finally:
            per_refresh.append(1000.0 * (time.thread_time() - c0))

    monitor.GPUMonitor.refresh = timed
    sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=1, seed=0))
    prefill(sampler, 65.0)
    sampler.start()
    panel = None
    if mode in ("live_idle", "live_busy"):
        panel = monitor.GPUMonitor(sampler=sampler, start=True)
    elif mode == "after_tick_busy":
        panel = monitor.GPUMonitor(sampler=sampler, start=False)
        sampler.add_listener(lambda _s, _now: panel.refresh())
    time.sleep(2.0)
    threads = {t.name: t.ident for t in threading.enumerate() if t.name.startswith("nbgpu")}
    clocks = {name: time.pthread_getcpuclockid(ident) for name, ident in threads.items()}
    c0 = {name: time.clock_gettime(c) for name, c in clocks.items()}
    n0 = len(per_refresh)
    t0 = time.perf_counter()
    x = 0
    while time.perf_counter() - t0 < seconds:
        if mode.endswith("busy"):
            for i in range(1000):
                x += i * i % 7
        else:
            time.sleep(0.05)
    wall = time.perf_counter() - t0
    c1 = {name: time.clock_gettime(c) for name, c in clocks.items()}
    if panel is not None:
        panel.close()
    sampler.stop()
    cpu = {name: 1000.0 * (c1[name] - c0[name]) / wall for name in clocks}
    done = per_refresh[n0:]
    return {"threads_cpu_ms_per_s": cpu, "total_cpu_ms_per_s": sum(cpu.values()),
            "refreshes": len(done),
            "refresh_cpu_ms_median": statistics.median(done) if done else None}


def _child(mode: str, seconds: float) -> None:
    sys.path.insert(0, str(ROOT))
    out = _warm() if mode == "warm" else _live(mode, seconds)
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args.child, args.seconds)
        return 0
    sys.path.insert(0, str(ROOT))
    from benchmarks.env import host_info

    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    for _ in range(args.rounds):
        for mode in MODES:
            done = subprocess.run([sys.executable, __file__, "--out", os.devnull, "--child", mode,
                                   "--seconds", str(args.seconds)], capture_output=True, text=True,
                                  check=True, env=env, cwd=ROOT)
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    summary = {
        "warm_refresh_cpu_ms_median": statistics.median(r["cpu_ms_median"] for r in runs["warm"]),
        "warm_send_share_profiled": statistics.median(r["send_share_profiled"] for r in runs["warm"]),
    }
    for mode in MODES[1:]:
        summary[f"{mode}_total_cpu_ms_per_s"] = statistics.median(
            r["total_cpu_ms_per_s"] for r in runs[mode])
        medians = [r["refresh_cpu_ms_median"] for r in runs[mode] if r["refresh_cpu_ms_median"]]
        if medians:
            summary[f"{mode}_refresh_cpu_ms_median"] = statistics.median(medians)
    doc = {"command": " ".join(["python", *sys.argv]), "host": host_info(),
           "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "setup": "1 simulated GPU, sampler and panel at defaults (interval 1 s, refresh 1 s, "
                    "60 s window prefilled), a recording comm as the kernel",
           "rounds": args.rounds, "seconds_per_live_run": args.seconds, "summary": summary,
           "runs": runs}
    args.out.write_text(json.dumps(doc, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
