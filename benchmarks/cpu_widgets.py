"""Widget traffic of an open panel over 8 simulated GPUs: messages and bytes per second,
per widget, at sampler intervals 0.1 s and 0.5 s (the count should not follow the rate).

The store is first given the panel's whole window (plus margin) of history at the real
rates, so the sparklines are full, as in a panel that has been open for a while; traffic
then is steady state instead of growing as the window fills.
"""

from __future__ import annotations

import time
from collections import Counter

from .panel_driver import find_panel, prefill
from .registry import Context
from .report import Outcome, Target, UnavailableError

MAX_UPDATES_PER_WIDGET_S = 4.0
MAX_BYTES_PER_S = 50_000
RATE_INDEPENDENCE = 0.10  # messages/s at 0.1 s within 10 % of those at 0.5 s
WARMUP_S = 1.5
MIN_REFRESH_S = 0.25
def _measure(api, interval: float, seconds: float, **panel_kw) -> dict:
    import nbgpu

    from .comm_recorder import install

    log = install()
    sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=8, seed=0), interval=interval)
    window_s = api.default_window_s()
    prefilled = prefill(sampler, window_s + 5.0)
    sampler.start()
    run = api.drive(sampler, **panel_kw)
    try:
        time.sleep(WARMUP_S)  # the panel's first full draw is not steady-state traffic
        t0 = time.perf_counter()
        time.sleep(seconds)
        t1 = time.perf_counter()
    finally:
        facts = run.stop()
        sampler.stop()
    sent = [m for m in log.between(t0, t1) if m.msg_type == "comm_msg"]
    per_widget = Counter(m.comm_id for m in sent if m.method == "update")
    wall = t1 - t0
    return {"interval_s": interval, "measured_s": wall, "messages": len(sent),
            "bytes": sum(m.nbytes for m in sent), "messages_per_s": len(sent) / wall,
            "bytes_per_s": sum(m.nbytes for m in sent) / wall,
            "widgets_updating": len(per_widget),
            "max_updates_per_widget_per_s": max(per_widget.values(), default=0) / wall,
            "refresh_s": getattr(run.panel, "refresh_s", None), "window_s_shown": window_s,
            "prefilled_rows": prefilled, "panel": facts}


def run(ctx: Context) -> Outcome:
    api = find_panel()
    if not api.available:
        raise UnavailableError(api.reason)
    seconds = 4.0 if ctx.quick else 12.0
    fast = _measure(api, 0.1, seconds)
    slow = _measure(api, 0.5, seconds)
    out = Outcome(raw={"interval_0.1": fast, "interval_0.5": slow, "gpus": 8})
    if not ctx.quick:  # the fastest refresh a user may ask for: figures, not the default's targets
        fastest = _measure(api, 0.1, seconds, refresh_s=MIN_REFRESH_S)
        out.raw["interval_0.1_refresh_0.25"] = fastest
        out.figure("max updates per widget, refresh 0.25 s (fastest allowed)",
                   fastest["max_updates_per_widget_per_s"], "/s")
        out.figure("bytes sent, refresh 0.25 s (fastest allowed)", fastest["bytes_per_s"] / 1000, "KB/s")
    out.targets.append(Target("max updates per widget, interval 0.1", fast["max_updates_per_widget_per_s"],
                              "/s", "<=", MAX_UPDATES_PER_WIDGET_S))
    out.targets.append(Target("bytes sent, interval 0.1", fast["bytes_per_s"] / 1000, "KB/s", "<=",
                              MAX_BYTES_PER_S / 1000))
    ratio = fast["messages_per_s"] / slow["messages_per_s"] if slow["messages_per_s"] else float("nan")
    out.targets.append(Target("messages/s ratio 0.1 vs 0.5, distance from 1", abs(ratio - 1), "", "<=",
                              RATE_INDEPENDENCE, note=f"ratio {ratio:.3f}"))
    out.figure("messages/s, interval 0.1", fast["messages_per_s"], "/s")
    out.figure("messages/s, interval 0.5", slow["messages_per_s"], "/s")
    out.figure("bytes/s, interval 0.5", slow["bytes_per_s"] / 1000, "KB/s")
    out.notes.append("Counted with a recording comm in place of the kernel's: each message JSON-encoded "
                     "plus its binary buffers, as the kernel would send it. KB = 1000 bytes.")
    return out
