"""Exporter scrape time with 8 simulated GPUs: rendering the text, and a full HTTP scrape."""

from __future__ import annotations

import time
import urllib.request

from .registry import Context
from .report import Outcome, Target, UnavailableError
from .stats import median

SCRAPE_TARGET_MS = 10.0


def run(ctx: Context) -> Outcome:
    import nbgpu

    try:
        from nbgpu.exporter import prometheus_text, serve
    except ImportError as exc:
        raise UnavailableError(f"exporter not available in this tree: {exc}") from exc
    repeats = 20 if ctx.quick else 200
    sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=8, seed=0)).start()
    try:
        time.sleep(1.2)  # a few ticks so every metric has a reading
        render_ms, scrape_ms = [], []
        text = ""
        for _ in range(repeats):
            t0 = time.perf_counter()
            text = prometheus_text(sampler)
            render_ms.append(1000 * (time.perf_counter() - t0))
        with serve(sampler, port=0) as exporter:
            for _ in range(repeats):
                t0 = time.perf_counter()
                with urllib.request.urlopen(exporter.url, timeout=10) as resp:
                    body = resp.read()
                scrape_ms.append(1000 * (time.perf_counter() - t0))
    finally:
        sampler.stop()
    raw = {"repeats": repeats, "render_ms": render_ms, "scrape_ms": scrape_ms, "text_bytes": len(text),
           "scrape_bytes": len(body), "series_lines": sum(1 for ln in text.splitlines()
                                                          if ln and not ln.startswith("#"))}
    out = Outcome(raw=raw)
    out.targets.append(Target("HTTP scrape of 8 GPUs (median)", median(scrape_ms), "ms", "<",
                              SCRAPE_TARGET_MS))
    out.figure("render text of 8 GPUs (median)", median(render_ms), "ms")
    out.figure("scrape size", len(body) / 1024, "KiB")
    return out
