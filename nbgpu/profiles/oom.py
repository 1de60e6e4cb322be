"""The out-of-memory post-mortem: what filled the GPU when a cell died of CUDA OOM."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .. import holders
from ..diagnostics.alerts import SEVERITIES
from ..errors import BadArgumentError, FileError, NbgpuError, warn_user
from ..files import atomic_file, check_target
from ..peaks import match_torch, torch_cuda, torch_uuid
from ..units import GIB, KIB, MIB, TIB, as_float, fmt_bytes
from .capture import Capture, pick_sampler

if TYPE_CHECKING:
    from ..sampler import Sampler

OOM_CLASS_NAMES = ("OutOfMemoryError", "ResourceExhaustedError")
_OOM_TEXT = re.compile(r"CUDA out of memory|CUDA error: out of memory|RESOURCE_EXHAUSTED|"
                       r"OOM when allocating|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation")
_REQUEST = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) ?([KMGT]i?B|B)")
_TORCH_GPU = re.compile(r"GPU (\d+) has a total capacity")
_TF_GPU = re.compile(r"device:GPU:(\d+)")
_UNITS = {"B": 1, "KiB": KIB, "MiB": MIB, "GiB": GIB, "TiB": TIB, "KB": KIB, "MB": MIB, "GB": GIB, "TB": TIB}
TOP_ALLOCATIONS = 5
TOP_HOLDERS = 3
STACK_FRAMES = 3
SNAPSHOT_SECONDS = 120.0
ALERT_FIELDS = ("rule", "severity", "gpu", "start", "message", "suggestion")


def is_oom(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what caused it) is a GPU out-of-memory error of a framework."""
    seen = 0
    while exc is not None and seen < 8:
        if any(cls.__name__ in OOM_CLASS_NAMES for cls in type(exc).__mro__) or _OOM_TEXT.search(str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def requested_bytes(message: str) -> float:
    """The allocation that failed, from PyTorch's message ("Tried to allocate 2.00 GiB"); NaN if absent."""
    m = _REQUEST.search(message)
    return float(m[1]) * _UNITS[m[2]] if m else math.nan


@dataclass(frozen=True)
class Allocation:
    """A live allocation at the failure: its size and where in Python it was made (innermost first)."""

    size_bytes: int
    device: int
    stack: tuple[str, ...]


def framework_memory() -> tuple[str | None, dict[int, dict[str, float]], str, list[Allocation]]:
    """(framework, {device index: allocated/reserved/peak bytes}, allocator history state, largest
    live allocations) from a framework the user imported."""
    cuda, tf, out = torch_cuda(), sys.modules.get("tensorflow"), {}
    with contextlib.suppress(Exception):
        for i in range(cuda.device_count()) if cuda is not None else ():
            out[i] = {"allocated_bytes": float(cuda.memory_allocated(i)), "uuid": torch_uuid(cuda, i),
                      "reserved_bytes": float(cuda.memory_reserved(i)),
                      "peak_allocated_bytes": float(cuda.max_memory_allocated(i))}
        for i, _ in enumerate(tf.config.list_logical_devices("GPU")) if cuda is None and tf else ():
            info = tf.config.experimental.get_memory_info(f"GPU:{i}")
            out[i] = {"allocated_bytes": float(info["current"]), "reserved_bytes": math.nan,
                      "peak_allocated_bytes": float(info["peak"]), "uuid": ""}
    if cuda is not None:
        return "pytorch", out, *largest_allocations()
    return ("tensorflow" if tf is not None else None), out, "unavailable", []


def _user_frames(frames: list[dict]) -> tuple[str, ...]:
    """The innermost Python frames outside PyTorch itself, as ``file:line in function``."""
    named = [(str(f.get("filename", "")), f) for f in frames]
    return tuple(f"{name.rsplit('/', 1)[-1]}:{f.get('line', '?')} in {f.get('name', '?')}"
                 for name, f in named if "/torch/" not in name and "/site-packages/" not in name
                 and (name.endswith(".py") or (name.startswith("<") and not name.startswith("<frozen")))
                 )[:STACK_FRAMES]


def largest_allocations() -> tuple[str, list[Allocation]]:
    """("on" | "off" | "unavailable", the largest live allocations) from PyTorch's allocator."""
    try:
        snap = torch_cuda().memory._snapshot()
    except Exception:  # no CUDA torch, or an allocator without snapshots
        return "unavailable", []
    blocks, stacks = [], False
    for seg in snap.get("segments", []):
        for blk in seg.get("blocks", []):
            if blk.get("state") != "active_allocated":
                continue
            frames = blk.get("frames") or []
            stacks = stacks or bool(frames)
            blocks.append(Allocation(int(blk.get("requested_size") or blk.get("size", 0)),
                                     int(seg.get("device", 0)), _user_frames(frames)))
    if not stacks:
        return "off", []
    return "on", sorted(blocks, key=lambda a: a.size_bytes, reverse=True)[:TOP_ALLOCATIONS]


@dataclass
class GpuMemory:
    """One GPU at the failure: NVML's view, the framework's view, and what lies outside it."""

    gpu: object
    nvml_used_bytes: float
    nvml_peak_bytes: float
    mem_total_bytes: float
    allocated_bytes: float = math.nan
    reserved_bytes: float = math.nan
    peak_allocated_bytes: float = math.nan

    @property
    def outside_framework_bytes(self) -> float:
        """NVML's used memory beyond what the framework reserved (context, libraries, other processes)."""
        return self.nvml_used_bytes - self.reserved_bytes


@dataclass
class OomStory:
    """What the post-mortem report says: when it failed, what was asked, each GPU's memory."""

    failed_at: float
    error: str
    requested_bytes: float
    framework: str | None
    failed_gpu: object
    gpus: list[GpuMemory] = field(default_factory=list)
    allocator_history: str = "unavailable"
    allocations: list[Allocation] = field(default_factory=list)
    holders: list[dict] = field(default_factory=list)  # the largest rows of memory_by_name
    freed_by: dict = field(default_factory=dict)  # what each %gpumon free option gives back


def build_story(cap: Capture, exc: BaseException) -> OomStory:
    """Gather the post-mortem of ``exc`` in ``cap`` now, while the failing frame still lives."""
    failed_at = time.time()
    message = str(exc)
    framework, figures, history_state, allocations = framework_memory()
    devices = cap.devices()
    matched = match_torch([d for d in devices if d.parent is None], [figures[i] for i in sorted(figures)],
                          "uuid")
    m = _TORCH_GPU.search(message) or _TF_GPU.search(message)  # the framework's device index
    index = int(m[1]) if m else None
    failed_gpu = devices[index].key if index is not None and 0 <= index < len(devices) else None
    gpus = []
    for dev in devices:
        t, v = cap.sampler.timeline.series(dev.key, "mem_used_bytes")
        inside = [float(x) for tt, x in zip(t, v, strict=False) if cap.start_time - 5 <= tt <= failed_at + 1]
        fig = matched.get(dev.key, {})
        gpus.append(GpuMemory(dev.key, inside[-1] if inside else math.nan, max(inside, default=math.nan),
                              as_float(dev.mem_total_bytes), *(fig.get(k, math.nan) for k in
                              ("allocated_bytes", "reserved_bytes", "peak_allocated_bytes"))))
    first = message.strip().splitlines()[0] if message.strip() else ""
    device = holders.cuda_device(index=index) or "cuda"
    rows, attrs = holders.top_holders(device, TOP_HOLDERS, error=exc)
    return OomStory(failed_at, f"{type(exc).__name__}: {first}", requested_bytes(message), framework,
                    failed_gpu, gpus, history_state, allocations, rows, attrs.get("freed_by", {}))


def write_snapshot(path: str, sampler: Sampler, alert: object) -> None:
    """Write the last two minutes of memory/util/power and the allocator's figures to ``path`` (JSON)."""
    framework, figures, history_state, allocations = framework_memory()
    now = time.time()
    window = sampler.timeline.between(now - SNAPSHOT_SECONDS, now)
    series = {str(d.key): {m: window.series(d.key, m) for m in ("mem_used_bytes", "util_pct", "power_w")}
              for d in sampler.devices}
    data = {"written_at": now, "alert": {k: getattr(alert, k, None) for k in ALERT_FIELDS},
            "framework": framework, "framework_memory": figures,  # device indices become text keys
            "allocator_history": history_state, "largest_allocations": [asdict(a) for a in allocations],
            "timeline": {g: {m: {"time_s": np.round(t, 3).tolist(), "values": np.asarray(v, float).tolist()}
                             for m, (t, v) in by.items()} for g, by in series.items()}}
    with atomic_file(path) as fh:
        json.dump(data, fh, default=str)


def snapshot_on_alert(path: str, sampler: Sampler | None = None, *, rules: tuple[str, ...] = ("oom_risk",),
                      severity: str = "critical") -> Callable:
    """When an alert of ``rules`` at ``severity`` or above fires on ``sampler`` (None: the running
    one), write the last two minutes of its timeline and the allocator's figures to ``path`` (JSON,
    replaced atomically); returns the callback registered with ``sampler.on_alert``."""
    if severity not in SEVERITIES:
        raise BadArgumentError(f"severity must be one of {', '.join(SEVERITIES)}, got {severity!r}")
    sampler = sampler or pick_sampler()
    if sampler is None:
        raise BadArgumentError("snapshot_on_alert needs a running sampler: run %gpumon first, "
                               "or pass sampler=nbgpu.Sampler(...).start()")
    target, real, _ = check_target(path)  # refuses "", a folder, a FIFO, a missing folder
    if not os.access(os.path.dirname(real), os.W_OK):
        raise FileError(f"cannot write {target}: permission denied; choose a folder you can write to",
                        path=target)
    floor = SEVERITIES.index(severity)
    warned = []

    def on_alert(alert) -> None:
        if alert.rule in rules and SEVERITIES.index(alert.severity) >= floor:
            try:
                write_snapshot(target, sampler, alert)
            except (NbgpuError, OSError) as exc:  # known only now (disk full, folder gone): say it once
                if not warned:
                    warned.append(exc)
                    warn_user(f"nbgpu: the alert snapshot was not written: {exc}")

    sampler.on_alert(on_alert)
    return on_alert


@dataclass
class PostMortem:
    """A failed cell's capture and its OOM story: what the report shows first."""

    capture: Capture
    story: OomStory

    def text(self) -> str:
        """The memory story as plain text, one line per fact."""
        s = self.story
        lines = [f"GPU out of memory: {s.error}"]
        if math.isfinite(s.requested_bytes):
            lines.append(f"  the failed request: {fmt_bytes(s.requested_bytes)}")
        for g in s.gpus:
            mark = " (the one that failed)" if g.gpu == s.failed_gpu else ""
            lines.append(f"  GPU {g.gpu}{mark}: NVML used {fmt_bytes(g.nvml_used_bytes)} of "
                         f"{fmt_bytes(g.mem_total_bytes)} at the failure, peak {fmt_bytes(g.nvml_peak_bytes)}"
                         " in the cell")
            if s.framework and math.isfinite(g.allocated_bytes):
                lines.append(f"    {s.framework}: allocated {fmt_bytes(g.allocated_bytes)}, reserved "
                             f"{fmt_bytes(g.reserved_bytes)}, "
                             f"outside it {fmt_bytes(g.outside_framework_bytes)}")
        if s.holders:
            lines.append("  held by (%gpumon memory lists every name):")
            lines += [f"    {holders.holder_line(r)}" for r in s.holders]
        release = holders.release_line(s.holders, s.freed_by)
        lines += [f"  {release}"] if release else []
        if s.allocations:
            lines.append("  largest live allocations:")
            lines += [f"    {fmt_bytes(a.size_bytes)} on cuda:{a.device} at {' < '.join(a.stack) or '?'}"
                      for a in s.allocations]
        elif s.allocator_history == "off":
            lines.append("  allocator history is off: torch.cuda.memory._record_memory_history() before "
                         "the cell shows the largest allocations and their stacks (it slows allocation)")
        return "\n".join(lines)
