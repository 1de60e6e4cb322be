"""Post-mortem of kernels that died: read their flight rings, say when, what ran and why."""

from __future__ import annotations

import json
import time
from pathlib import Path

from . import flight
from .sources.nvml_events import meaning

GIB = 1024 ** 3
WINDOW_S = 10.0


def _gib(v: float) -> str:
    return f"{v / GIB:.1f}"


def _rss_rate(recs: list[dict]) -> float | None:
    pts = [(r["t"], r["rss"]) for r in recs if r.get("rss") is not None]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def verdict(recs: list[dict], oom_now: int | None = None) -> str:
    """The likeliest cause of death, with its evidence, from the last records."""
    if not recs:
        return "it died before its first record: no evidence of a cause"
    last = recs[-1]
    window = [r for r in recs if r["t"] >= last["t"] - WINDOW_S]
    rate = _rss_rate(window)
    rss = last.get("rss")
    tail = ""
    if rss is not None:
        tail = f", this kernel {rss / GIB:.0f} GiB"
        if rate is not None and rate > 0:
            fast = rate >= GIB / 10
            tail += f", rising {rate / GIB:.1f} GiB/s" if fast else f", rising {rate / 2**20:.0f} MiB/s"
    oom = [r.get("cg_oom") for r in window if r.get("cg_oom") is not None]
    confirmed = (len(oom) > 1 and oom[-1] > oom[0]) or (oom and oom_now is not None and oom_now > oom[-1])
    word = "confirmed" if confirmed else "likely"
    for r in reversed(window):
        cmax, ccur = r.get("cg_max"), r.get("cg_cur")
        if cmax and ccur is not None and ccur >= 0.95 * cmax:
            return (f"{word} killed by the out-of-memory killer: cgroup memory "
                    f"{100 * ccur / cmax:.0f} % ({_gib(ccur)} of {_gib(cmax)} GiB){tail}")
        total, used = r.get("ram_total"), r.get("ram_used")
        if total and used is not None and used >= 0.97 * total:
            return (f"{word} killed by the out-of-memory killer: host RAM "
                    f"{100 * used / total:.0f} % ({_gib(used)} of {_gib(total)} GiB){tail}")
    if confirmed:
        return f"confirmed killed by the out-of-memory killer (the cgroup's oom_kill count rose){tail}"
    faults = xids(recs)
    if faults:
        t, gpu, code = faults[-1]
        said = (f"GPU {gpu} reported XID {code} ({meaning(code)}) {max(last['t'] - t, 0):.0f} s "
                "before the last record: a GPU fault is the likely cause")
        earlier = "; ".join(f"XID {c} on GPU {g}" for _, g, c in faults[:-1])
        return said + (f" (earlier: {earlier})" if earlier else "")
    for r in reversed(window):
        for i, g in enumerate(r.get("gpus") or []):
            if g and g[0] is not None and g[1] and g[0] >= 0.97 * g[1]:
                return (f"GPU {i} memory was full ({_gib(g[0])} of {_gib(g[1])} GiB): an "
                        "out-of-memory failure in native GPU code is likely")
    return "no resource was near a limit: a crash inside native code is likely"


def xids(recs: list[dict]) -> list[tuple[float, object, int]]:
    """Every GPU fault the records name, oldest first, each once: (time, gpu, XID code)."""
    seen = {tuple(x) for r in recs for x in r.get("xid") or () if isinstance(x, list) and len(x) == 3}
    return sorted((x for x in seen if isinstance(x[2], int)), key=lambda x: x[0])


def describe(header: dict, recs: list[dict], oom_now: int | None = None) -> dict:
    """What is known of one dead kernel, as a plain dict (what ``--json`` prints)."""
    last = recs[-1] if recs else None
    died = last["t"] if last else header.get("began")
    cell = last.get("cell") if last else None
    out = {"pid": header.get("pid"), "host": header.get("host"), "died_at": died,
           "cell": None, "cause": verdict(recs, oom_now), "records": len(recs),
           "xids": [{"time": t, "gpu": g, "code": c, "meaning": meaning(c)} for t, g, c in xids(recs)]}
    if cell:
        out["cell"] = {"execution_count": cell[0], "first_line": cell[1],
                       "running_s": round(died - cell[2], 1)}
    return out


def message(info: dict) -> str:
    """One line: when the kernel died, what ran, and the likeliest cause."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["died_at"])) if info["died_at"] else "?"
    ran = "no cell was running"
    c = info["cell"]
    if c:
        ran = f"In [{c['execution_count']}] `{c['first_line']}` had run {c['running_s']:.0f} s"
    return f"nbgpu: the last kernel (pid {info['pid']}) died at about {when}; {ran}; {info['cause']}."


def dead_rings(directory: Path | None = None, include_reported: bool = False) -> list[tuple[Path, dict]]:
    """Rings of dead kernels not closed cleanly, newest first, with their descriptions."""
    d = directory or flight.cache_dir()
    out = []
    now = flight.oom_kills()
    for path in sorted(d.glob("flight-*.ring")) if d.is_dir() else []:
        got = flight.read_ring(path)
        if got is None:
            continue
        header, recs = got
        if header.get("closed") or not flight.is_dead(header):
            continue
        if header.get("reported") and not include_reported:
            continue
        out.append((path, describe(header, recs, now)))
    return sorted(out, key=lambda pi: pi[1]["died_at"] or 0, reverse=True)


def sweep(directory: Path | None = None, reported: bool = False) -> int:
    """Remove rings of gone kernels that closed cleanly (and, with ``reported``, those shown)."""
    d = directory or flight.cache_dir()
    n = 0
    for path in d.glob("flight-*.ring") if d.is_dir() else []:
        got = flight.read_ring(path)
        if got is None or not flight.is_dead(got[0]):
            continue
        if got[0].get("closed") or (reported and got[0].get("reported")):
            try:
                path.unlink()
                n += 1
            except OSError:
                pass
    return n


def report_at_load() -> list[str]:
    """Each unreported dead kernel's line, once (its ring is then marked reported)."""
    lines = []
    for path, info in dead_rings():
        lines.append(message(info))
        try:
            flight.set_flag(path, reported=True)
        except OSError:
            pass
    try:
        sweep()
    except OSError:
        pass
    return lines


def run_cli(all_: bool, as_json: bool, clear: bool) -> int:
    """``nbgpu postmortem``: the newest dead kernel (``--all``: every one), or ``--clear``."""
    if clear:
        n = sweep(reported=True)
        print(f"nbgpu postmortem: removed {n} flight record(s) already shown")
        return 0
    rings = dead_rings(include_reported=True)
    if not all_:
        rings = rings[:1]
    for path, _ in rings:
        try:
            flight.set_flag(path, reported=True)
        except OSError:
            pass
    if as_json:
        print(json.dumps([info for _, info in rings], indent=1))
    elif not rings:
        print(f"nbgpu postmortem: no kernel died without closing its flight record in {flight.cache_dir()}")
    else:
        for _, info in rings:
            print(message(info))
    return 0
