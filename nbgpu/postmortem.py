"""Post-mortem of kernels that died: read their flight rings, say when, what ran and why."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from . import flight, flight_reads
from .sources.nvml_reads import meaning
from .units import GIB, fmt_bytes, fmt_rate, gib

WINDOW_S = 10.0
_TICKS = os.sysconf("SC_CLK_TCK")  # the unit of a process's start time in /proc
REACH_S = 2.0  # memory rising to its limit within this long after the last record counts as at it


def _of(used: float, total: float) -> str:
    """``62.1 of 62.8 GiB`` (two decimals under 10 GiB)."""
    digits = 2 if total < 10 * GIB else 1
    return f"{gib(used, digits)} of {gib(total, digits)} GiB"


def _rate(recs: list[dict], key: str) -> float | None:
    """Bytes a second ``key`` rose from the first record of ``recs`` to the last (None: unknown)."""
    pts = [(r["t"], r[key]) for r in recs if r.get(key) is not None]
    if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
        return None
    return (pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0])


def _at_limit(window: list[dict], used: str, limit: str, full: float) -> dict | None:
    """The newest record where ``used`` was at ``full`` of ``limit``, or was past
    ``flight.NEAR_LIMIT`` and rising fast enough to reach it within ``REACH_S`` (the kill
    comes between two records)."""
    for r in reversed(window):
        u, cap = r.get(used), r.get(limit)
        if cap and u is not None and u >= full * cap:
            return r
    last = next((r for r in reversed(window) if r.get(limit) and r.get(used) is not None), None)
    rate = _rate(window, used)
    if last is None or rate is None or rate <= 0 or last[used] < flight.NEAR_LIMIT * last[limit]:
        return None
    return last if last[used] + rate * REACH_S >= full * last[limit] else None


def oom_killed_in_log(pid: int, path: str = "/dev/kmsg", after_s: float = 0.0) -> bool | None:
    """Whether the kernel log says the OOM killer killed ``pid`` later than ``after_s`` seconds
    after boot (an older process had the pid before); None: the log is unreadable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    said = f"Killed process {pid} (".encode()
    try:
        while True:
            try:
                text = os.read(fd, 65536)  # /dev/kmsg: one message a read
            except BlockingIOError:  # read to the end
                return False
            except OSError:  # a message overwritten while reading: read on
                continue
            if not text:
                return False
            # a message is "prio,seq,usec,flags;text": usec since boot
            if said in text and float(text.split(b",", 3)[2]) >= after_s * 1e6:
                return True
    except (IndexError, ValueError):  # not a kernel log
        return None
    finally:
        os.close(fd)


def verdict(recs: list[dict], oom_now: int | None = None, logged_oom: bool | None = None) -> str:
    """The likeliest cause of death, with its evidence, from the last records."""
    if not recs:
        return "it died before its first record: no evidence of a cause"
    last = recs[-1]
    window = [r for r in recs if r["t"] >= last["t"] - WINDOW_S]
    rate = _rate(window, "rss")
    rss = last.get("rss")
    tail = ""
    if rss is not None:
        tail = f", this kernel {fmt_bytes(rss)}"
        if rate is not None and rate > 0:
            tail += f", rising {fmt_rate(rate)}"
    oom = [r.get("cg_oom") for r in window if r.get("cg_oom") is not None]
    confirmed = (len(oom) > 1 and oom[-1] > oom[0]) or (oom and oom_now is not None and oom_now > oom[-1])
    word = "confirmed" if confirmed or logged_oom else "likely"
    for what, used, limit, full in (("cgroup memory", "cg_cur", "cg_max", 0.95),
                                    ("host RAM", "ram_used", "ram_total", 0.97)):
        r = _at_limit(window, used, limit, full)
        if r is not None:
            return (f"{word} killed by the out-of-memory killer: {what} {100 * r[used] / r[limit]:.0f} % "
                    f"({_of(r[used], r[limit])}){tail}")
    if logged_oom:
        return f"confirmed killed by the out-of-memory killer: the kernel log says so{tail}"
    if confirmed:  # another process of the cgroup may have been the one killed: not confirmed
        return ("likely killed by the out-of-memory killer: its cgroup's oom_kill count rose, "
                f"though its memory was not seen at the limit{tail}")
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
                return (f"GPU {i} memory was full ({_of(g[0], g[1])}): an "
                        "out-of-memory failure in native GPU code is likely")
    return "no resource was near a limit: a crash inside native code is likely"


def xids(recs: list[dict]) -> list[tuple[float, object, int]]:
    """Every GPU fault the records name, oldest first, each once: (time, gpu, XID code)."""
    seen = {tuple(x) for r in recs for x in r.get("xid") or () if isinstance(x, list) and len(x) == 3}
    return sorted((x for x in seen if isinstance(x[2], int)), key=lambda x: x[0])


def describe(header: dict, recs: list[dict], oom_now: int | None = None,
             logged_oom: bool | None = None) -> dict:
    """What is known of one dead kernel, as a plain dict (what ``--json`` prints)."""
    last = recs[-1] if recs else None
    died = last["t"] if last else header.get("began")
    cell = last.get("cell") if last else None
    out = {"pid": header.get("pid"), "host": header.get("host"), "died_at": died,
           "cell": None, "cause": verdict(recs, oom_now, logged_oom), "records": len(recs),
           "xids": [{"time": t, "gpu": g, "code": c, "meaning": meaning(c)} for t, g, c in xids(recs)]}
    if cell:
        out["cell"] = {"execution_count": cell[0], "first_line": cell[1],
                       "running_s": round(died - cell[2], 1), "cell_id": (cell[3:] or [None])[0]}
    return out


def message(info: dict) -> str:
    """One line: when the kernel died, what ran, and the likeliest cause."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info["died_at"])) if info["died_at"] else "?"
    ran = "no cell was running"
    c = info["cell"]
    if c:
        ran = f"In [{c['execution_count']}] `{c['first_line']}` had run {c['running_s']:.0f} s"
    return f"nbgpu: the last kernel (pid {info['pid']}) died at about {when}; {ran}; {info['cause']}."


def _dead(directory: Path | None) -> Iterator[tuple[Path, dict, list[dict]]]:
    """(ring, header, records) of each kernel that is gone, oldest file name first."""
    d = directory or flight.cache_dir()
    for path in sorted(d.glob("flight-*.ring")) if d.is_dir() else []:
        got = flight.read_ring(path)
        if got is not None and flight.is_dead(got[0]):
            yield path, *got


def dead_rings(directory: Path | None = None, include_reported: bool = False) -> list[tuple[Path, dict]]:
    """Rings of dead kernels not closed cleanly, newest first, with their descriptions."""
    out = []
    for path, header, recs in _dead(directory):
        if header.get("closed") or (header.get("reported") and not include_reported):
            continue
        out.append((path, describe(header, recs, flight_reads.oom_kills(header.get("cg_events")),
                                   oom_killed_in_log(int(header.get("pid", -1)),
                                                     after_s=header.get("start", 0) / _TICKS))))
    return sorted(out, key=lambda pi: pi[1]["died_at"] or 0, reverse=True)


def sweep(directory: Path | None = None, reported: bool = False) -> int:
    """Remove rings of gone kernels that closed cleanly (and, with ``reported``, those shown)."""
    n = 0
    for path, header, _ in _dead(directory):
        if header.get("closed") or (reported and header.get("reported")):
            with contextlib.suppress(OSError):
                path.unlink()
                n += 1
    return n


def claim(path: Path) -> bool:
    """Mark a ring reported; False if it already was (another kernel reported it first)."""
    try:
        before = flight.set_flag(path, reported=True)
    except OSError:
        return False
    return before is not None and not before.get("reported")


def report_at_load() -> list[str]:
    """Each unreported dead kernel's line, once (its ring is then marked reported)."""
    lines = [message(info) for path, info in dead_rings() if claim(path)]
    with contextlib.suppress(OSError):
        sweep()
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
        claim(path)
    if as_json:
        print(json.dumps([info for _, info in rings], indent=1))
    elif not rings:
        print(f"nbgpu postmortem: no kernel died without closing its flight record in {flight.cache_dir()}")
    else:
        for _, info in rings:
            print(message(info))
    return 0
