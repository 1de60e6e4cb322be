"""Whose memory it is: this kernel and its children, other processes, PID-namespace trouble (NVML lists
host PIDs: attribution is checked first); other people's command lines and user names only when asked."""

from __future__ import annotations

import contextlib
import getpass
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..peaks import torch_cuda, torch_uuid
from ..sources.base import Device, ProcessInfo
from ..sources.host import descendant_pids
from ..units import fmt_bytes

if TYPE_CHECKING:
    import pandas as pd

    from ..sampler import Sampler

OK, NONE_LISTED, MISMATCH, UNKNOWN = "ok", "none_listed", "pid_namespace_mismatch", "unknown"


def self_pid() -> int:
    """This process's PID as the mounted /proc numbers it: ``os.getpid()``, except in a PID
    namespace that still sees the host's /proc, where /proc (and NVML) use the host's number."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def tree_pids() -> set[int]:
    """This process and its descendants (DataLoader workers, subprocesses), as /proc numbers them."""
    me = self_pid()
    return {me} | descendant_pids(me)


def used_bytes(p: ProcessInfo) -> float:
    """Memory a process holds, in bytes; NaN where NVML does not say."""
    return math.nan if p.used_bytes is None else float(p.used_bytes)


def framework_memory() -> list[dict]:
    """Per device of PyTorch (allocated, reserved bytes, UUID), then of TensorFlow's running context
    (``get_memory_info`` current and peak): asked only once the kernel started CUDA through them."""
    out: list[dict] = []
    if (cuda := torch_cuda()) is not None:
        with contextlib.suppress(Exception):
            out += [{"framework": "torch", "device": f"cuda:{i}", "index": i, "uuid": torch_uuid(cuda, i),
                     "allocated_bytes": float(cuda.memory_allocated(i)),
                     "reserved_bytes": float(cuda.memory_reserved(i))} for i in range(cuda.device_count())]
    tf, eager = sys.modules.get("tensorflow"), sys.modules.get("tensorflow.python.eager.context")
    with contextlib.suppress(Exception):  # a GPU that cannot say ends the list
        if tf is None or eager is None or not getattr(eager.context(), "_initialized", False):
            return out  # asking would start it
        for i in range(len(tf.config.list_physical_devices("GPU"))):
            info = tf.config.experimental.get_memory_info(f"GPU:{i}")
            out.append({"framework": "tensorflow", "device": f"GPU:{i}", "index": i, "uuid": "",
                        "allocated_bytes": float(info.get("current", 0)),
                        "peak_bytes": float(info.get("peak", 0))})
    return out


def nvml_index_of(entry: dict, devices: list[Device]) -> object:
    """The NVML GPU key a framework device is, by UUID, else by CUDA_VISIBLE_DEVICES, else index."""
    uuid = entry.get("uuid", "").lower().removeprefix("gpu-")
    same = [d.key for d in devices if uuid and d.uuid.lower().removeprefix("gpu-") == uuid]
    if same:
        return same[0]
    if visible := os.environ.get("CUDA_VISIBLE_DEVICES"):
        parts = [p.strip() for p in visible.split(",") if p.strip()]
        if entry["index"] < len(parts) and parts[entry["index"]].isdigit():
            return int(parts[entry["index"]])
        return None
    return entry["index"]


def attribute(processes: dict | None, mine: set[int], framework_bytes: float = 0.0,
              pid_exists: Callable[[int], bool] | None = None) -> tuple[str, str]:
    """(status, explanation) of whether NVML's PIDs can be matched to this kernel's; none of ours
    listed while a framework says we hold ``framework_bytes`` means they cannot be compared."""
    if processes is None:
        return UNKNOWN, "this source reports no process lists"
    listed = {p.pid for procs in processes.values() for p in procs}
    if listed & mine:
        return OK, ""
    if pid_exists is None:
        import psutil

        pid_exists = psutil.pid_exists
    if not listed and framework_bytes <= 0:
        return NONE_LISTED, "NVML lists no process on any GPU"
    if not listed:
        return MISMATCH, ("NVML lists no process although this kernel holds "
                          f"{fmt_bytes(framework_bytes)} of GPU memory; the process lists are "
                          "hidden here (a container's PID namespace or missing permission)")
    if not any(map(pid_exists, listed)):
        return MISMATCH, (f"none of the {len(listed)} PID(s) NVML lists exist in this PID namespace "
                          "(NVML reports host PIDs; this looks like a container), so their memory "
                          "cannot be attributed to this kernel or to others")
    if framework_bytes > 0:
        return MISMATCH, ("this kernel holds " f"{fmt_bytes(framework_bytes)} of GPU memory but NVML "
                          "lists none of its PIDs (NVML reports host PIDs; this looks like a "
                          "container's PID namespace), so the listed processes are not attributed")
    return OK, ""


# A PyTorch process's NVML figure: its allocator's reserved memory plus the CUDA context and libraries
# (about 0.5 GiB on an H200), reserved perhaps moved a little since: what "matched by memory" accepts.
CONTEXT_MAX_BYTES = 2 * 1024**3
DRIFT_BYTES = 64 * 1024**2


@dataclass(frozen=True)
class Match:
    """A PID NVML lists, found to be ours where the PID namespace hides it, and how sure that is."""

    pid: int
    who: str  # "this kernel", "child process" or "this container"
    how: str  # "NSpid" (certain), "cgroup" (same container), "memory" (the one that fits)
    detail: str = ""  # "matched by memory, 2.5 GiB"


def _read(path: str, link: bool = False) -> str:
    """A /proc file's text, or with ``link`` where it points; "" where it cannot be read."""
    try:
        return os.readlink(path) if link else Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _by_proc(pid: int, mine: set[int], root: str, own_ns: str, own_cgroup: str) -> Match | None:
    """What ``root/<pid>`` says of a listed PID, where it is visible (a host /proc)."""
    if not (status := _read(f"{root}/{pid}/status")):
        return None
    nspid = next((ln.split()[1:] for ln in status.splitlines() if ln.startswith("NSpid:")), [])
    if (len(nspid) > 1 and own_ns and _read(f"{root}/{pid}/ns/pid", link=True) == own_ns
            and int(nspid[-1]) in mine):
        who = "this kernel" if int(nspid[-1]) == os.getpid() else "child process"
        return Match(pid, who, "NSpid", f"matched by NSpid: pid {nspid[-1]} here")
    cgroup = _read(f"{root}/{pid}/cgroup").strip()
    if cgroup and cgroup == own_cgroup and cgroup not in ("0::/", "0::/init.scope"):
        return Match(pid, "this container", "cgroup", "matched by cgroup: same container")
    return None


def _by_memory(processes: dict, taken: set[int], frameworks: list[dict], devices: list) -> dict[int, Match]:
    """This process on each GPU where exactly one listed process fits its framework's figures."""
    out = {}
    for entry in frameworks:
        reserved = entry.get("reserved_bytes", entry.get("allocated_bytes", 0.0))
        gpu = nvml_index_of(entry, devices)
        fits = [p for p in processes.get(gpu, []) if p.pid not in taken and p.used_bytes is not None
                and reserved - DRIFT_BYTES - 0.05 * reserved <= p.used_bytes <= reserved + CONTEXT_MAX_BYTES]
        if len(fits) == 1:
            p = fits[0]
            out[p.pid] = Match(p.pid, "this kernel", "memory",
                               f"matched by memory, {fmt_bytes(p.used_bytes)}")
    return out


def match_hidden(processes: dict, mine: set[int], devices: list, frameworks: list[dict] | None = None,
                 root: str = "/proc", by_memory: bool = True) -> dict[int, Match]:
    """Listed PIDs tied to this kernel, its children or its container where the PID namespace hides
    them: by ``NSpid`` in ``root/<pid>``, else cgroup; then (``by_memory``) the one process per GPU
    fitting what ``frameworks`` hold (None: ``framework_memory()`` now)."""
    own_ns, own_cgroup = _read(f"{root}/self/ns/pid", link=True), _read(f"{root}/self/cgroup").strip()
    listed = {p.pid for procs in processes.values() for p in procs}
    found = {pid: hit for pid in listed if (hit := _by_proc(pid, mine, root, own_ns, own_cgroup))}
    if by_memory and not any(m.who == "this kernel" for m in found.values()):
        frameworks = framework_memory() if frameworks is None else frameworks
        found.update(_by_memory(processes, set(found), frameworks, devices))
    return found


def _command(pid: int) -> tuple[str, str]:
    import psutil

    try:
        p = psutil.Process(pid)
        return " ".join(p.cmdline())[:200], p.username()
    except (psutil.Error, OSError):
        return "", ""


@dataclass
class MemoryOwners:
    """Per GPU: this kernel's processes, other processes (aggregated), notes and framework figures."""

    rows: list[dict]
    notes: list[str]
    status: str

    def to_pandas(self) -> pd.DataFrame:
        """One row per (GPU, owner): ``who``, ``pid``, ``processes``, ``used_bytes``, ..."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=COLUMNS)

    def _shown(self) -> list[tuple[dict, str, str, str, str]]:
        """(row, GPU, who, pid, memory) as both renderings show them: "this kernel (matched by memory,
        2.5 GiB)" where the PID was hidden, "other processes ×3" for several."""
        return [(r, str(r["gpu"]), (f"{r['who']} ({r['matched']})" if r["matched"] else r["who"])
                 + (f" ×{r['processes']}" if r["processes"] > 1 else ""),
                 "" if r["pid"] is None else str(r["pid"]), _size(r["used_bytes"])) for r in self.rows]

    def __str__(self) -> str:
        lines = [f"GPU {gpu}: {who}" + (f" (pid {pid})" if pid else "") + f": {size}"
                 + (f" user {r['user']}" if r["user"] else "") for r, gpu, who, pid, size in self._shown()]
        return "\n".join(lines + self.notes) or "no GPU memory in use"

    def _repr_html_(self) -> str:
        import html

        body = ""
        for r, gpu, who, pid, size in self._shown():  # this kernel's rows in bold
            who = html.escape(who) if r["who"] == "other processes" else f"<b>{html.escape(who)}</b>"
            body += "<tr>" + "".join(f"<td>{v}</td>" for v in (html.escape(gpu), who, pid, size)) + "</tr>"
        notes = "".join(f"<p>{html.escape(n)}</p>" for n in self.notes)
        return f"<table><tr><th>GPU</th><th>who</th><th>pid</th><th>memory</th></tr>{body}</table>{notes}"


COLUMNS = ("gpu", "who", "pid", "processes", "used_bytes", "command", "user", "matched")


def _row(*values) -> dict:
    """A row of ``COLUMNS`` (command, user and matched "" where not given)."""
    return dict(zip(COLUMNS, values + ("",) * (len(COLUMNS) - len(values)), strict=True))


def _size(used: float, count: int = 1) -> str:
    """Bytes as text ("unknown" for NaN), with the count where several processes hold them."""
    size = "unknown" if used != used else fmt_bytes(used)
    return f"{size} ({count} processes)" if count > 1 else size


def _framework_notes(entries: list[dict], devices: list[dict], ours: dict) -> list[str]:
    notes = []
    for e in entries:
        gpu, where = nvml_index_of(e, devices), f"{e['framework']} {e['device']}"
        where = where if gpu is None else f"GPU {gpu} ({where})"
        nvml_text = f", NVML {fmt_bytes(ours[gpu])} for this kernel" if ours.get(gpu) else ""
        if "reserved_bytes" in e:
            spare = e["reserved_bytes"] - e["allocated_bytes"]
            text = (f"{where}: {fmt_bytes(e['allocated_bytes'])} allocated, "
                    f"{fmt_bytes(e['reserved_bytes'])} reserved{nvml_text}")
            if spare >= 256e6:
                text += (f". {fmt_bytes(spare)} reserved but unallocated; "
                         "`torch.cuda.empty_cache()` returns it")
        else:
            text = (f"{where}: {fmt_bytes(e['allocated_bytes'])} in use, peak "
                    f"{fmt_bytes(e.get('peak_bytes', math.nan))}{nvml_text}")
        notes.append(text)
    return notes


def memory_owners(sampler: Sampler, show_others: bool = False) -> MemoryOwners:
    """Who holds the memory of each GPU: this kernel and its children, then everyone else, one by
    one with command line and user only with ``show_others``; up to 3 s for a first process list."""
    processes = sampler.processes()
    if not processes and sampler.running:
        sampler.request("procs")
        deadline = time.monotonic() + 3.0
        while not processes and time.monotonic() < deadline:
            time.sleep(0.05)
            processes = sampler.processes()
    if not processes and sampler.status().source_kind == "prometheus":
        processes = None  # Prometheus carries no process lists
    mine = tree_pids()
    frameworks = framework_memory()
    held = sum(e.get("reserved_bytes", e["allocated_bytes"]) for e in frameworks)
    status, why = attribute(processes, mine, held)
    notes = [why] if why else []
    matched = match_hidden(processes or {}, mine, sampler.devices, frameworks) if status == MISMATCH else {}
    rows, ours = [], {}
    for gpu in [d.key for d in sampler.devices]:
        others = []
        for p in sorted((processes or {}).get(gpu, []), key=lambda p: -(p.used_bytes or 0)):
            if status == OK and p.pid in mine:
                who, how = ("this kernel" if p.pid == self_pid() else "child process"), ""
            elif p.pid in matched:
                who, how = matched[p.pid].who, matched[p.pid].detail
            else:
                others.append(p)
                continue
            rows.append(_row(gpu, who, p.pid, 1, used_bytes(p), _command(p.pid)[0] if not how else "",
                             "", how))
            if p.used_bytes is not None and who != "this container":
                ours[gpu] = ours.get(gpu, 0.0) + p.used_bytes
        if not others:
            continue
        label = "other processes" if status == OK else "unattributed processes"
        if show_others:
            rows += [_row(gpu, label, p.pid, 1, used_bytes(p), *(_command(p.pid) if status == OK else ()))
                     for p in others]
        else:
            rows.append(_row(gpu, label, None, len(others), _sum([used_bytes(p) for p in others])))
    if status == NONE_LISTED:
        notes.append("No process holds GPU memory, or NVML does not show them here.")
    notes += _framework_notes(frameworks, sampler.devices, ours)
    return MemoryOwners(rows, notes, status)


@dataclass(frozen=True)
class GpuUsers:
    """Who holds one GPU's memory (NVML's sums, NaN where none known): this kernel's process tree,
    this user elsewhere, everyone else (never named); not ``attributed``: all in ``unattributed_*``."""

    gpu: object
    kernel_bytes: float = 0.0
    kernel_processes: int = 0
    user_bytes: float = 0.0
    user_processes: int = 0
    others_bytes: float = 0.0
    others_processes: int = 0
    unattributed_bytes: float = 0.0
    unattributed_processes: int = 0
    attributed: bool = True
    note: str = ""
    matched: str = ""  # how the kernel's memory was found where the PIDs were hidden ("by memory")


def _sum(values: list[float]) -> float:
    known = [v for v in values if v == v]
    return float(sum(known)) if known or not values else math.nan


def who_uses(sampler: Sampler, mine: set[int] | None = None, user: str | None = None,
             pid_exists: Callable[[int], bool] | None = None) -> dict[object, GpuUsers]:
    """Per GPU, the memory of this kernel (``mine``; None: its process tree), of ``user``'s other
    processes (None: whoever runs this) and of others; {} without process lists (Prometheus)."""
    if not (processes := sampler.processes()):
        return {}
    mine = tree_pids() if mine is None else mine
    user = getpass.getuser() if user is None else user
    status, why = attribute(processes, mine, 0.0, pid_exists)
    listed = {p.pid for procs in processes.values() for p in procs}
    hidden = status != OK or not listed & mine  # on a host /proc, NSpid may still find ours
    matched = match_hidden(processes, mine, sampler.devices, by_memory=status != OK) if hidden else {}
    kin = {pid for pid, m in matched.items() if m.who != "this container"}
    out = {}
    for gpu, procs in processes.items():
        groups: dict[str, list[float]] = {"kernel": [], "user": [], "others": [], "unattributed": []}
        for p in procs:
            who = "kernel" if p.pid in kin or (status == OK and p.pid in mine) else (
                "unattributed" if status != OK else "user" if p.user == user else "others")
            groups[who].append(used_bytes(p))
        how = sorted({matched[p.pid].how for p in procs if p.pid in kin}) if status != OK else []
        out[gpu] = GpuUsers(gpu, **{f"{g}_bytes": _sum(v) for g, v in groups.items()},
                            **{f"{g}_processes": len(v) for g, v in groups.items()}, attributed=status == OK,
                            note=why, matched=", ".join(f"by {h}" for h in how))
    return out


def users_line(u: GpuUsers) -> str:
    """One line for a person: "this kernel 4.0 GiB (2) · you elsewhere 1.0 GiB · others 12 GiB (3)"."""
    kernel = f"this kernel {_size(u.kernel_bytes, u.kernel_processes)}"
    parts = [(True, kernel), (u.user_processes, f"you elsewhere {_size(u.user_bytes, u.user_processes)}"),
             (u.others_processes, f"others {_size(u.others_bytes, u.others_processes)}")]
    if not u.attributed:  # the kernel where a match found it, then what stays hidden
        parts = [(u.kernel_processes, f"{kernel} (matched {u.matched})"),
                 (u.unattributed_processes or not u.kernel_processes,
                  f"{_size(u.unattributed_bytes, u.unattributed_processes)} held; not attributed: "
                  "this PID namespace hides the host PIDs NVML lists")]
    return " · ".join(text for shown, text in parts if shown)
