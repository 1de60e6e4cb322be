"""``%gpumon memory`` (which names hold device memory) and ``%gpumon free`` (release them)."""

from __future__ import annotations

import gc
import sys
import time
from typing import Any

from IPython.core.error import UsageError

from ..units import fmt_bytes
from .options import parse_free

NVML_WAIT_S = 2.0  # how long free waits for the sampler's fresh read of memory used


def _cuda():
    """torch, when it is imported and sees a GPU; else None."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and torch.cuda.is_available() else None


def memory_text(user_ns: dict) -> str:
    """The table of ``memory_by_name`` as text, sizes in GiB/MiB."""
    if sys.modules.get("torch") is None:
        return "nbgpu: torch is not imported, so no name holds tensors."
    from ..holders import memory_by_name

    device = "cuda" if _cuda() else "cpu"
    frame = memory_by_name(device=device, namespace=user_ns)
    if frame.empty:
        return f"nbgpu: no name holds {device} tensors."
    width = max(12, *(len(str(n)) for n in frame["name"]))
    lines = [f"{'name':<{width}}  {'size':>10}  what"]
    for row in frame.itertuples(index=False):
        extra = [x for x in (f"shared with {row.shared_with}" if row.shared_with else "",
                             "hidden" if row.hidden else "", row.note) if x]
        lines.append(f"{row.name!s:<{width}}  {fmt_bytes(row.bytes):>10}  {row.kind}"
                     + (f" ({'; '.join(extra)})" if extra else ""))
    freed_by = frame.attrs.get("freed_by", {})
    gives = [f"--{k.replace('_', '-')} {fmt_bytes(v)}" for k, v in freed_by.items() if v]
    lines += [f"%gpumon free gives back: {', '.join(gives)}"] if gives else []
    return "\n".join(lines)


def _readings() -> dict[str, int]:
    if (torch := _cuda()) is None:
        return {}
    return {"allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved()}


def _nvml_used(wait_s: float = NVML_WAIT_S) -> dict[object, float]:
    """NVML's memory used per GPU from an "edge" read of the running sampler after now; or {}."""
    from ..session import shared_sampler

    s = shared_sampler()
    if s is None or not s.running:
        return {}
    asked, deadline = time.time(), time.monotonic() + wait_s
    s.request("edge")
    keys = [d.key for d in s.devices if d.parent is None]
    while True:
        got = {k: v for k in keys if (tv := s.store.last_many(k).get("mem_used_bytes")) and tv[0] >= asked
               for v in (tv[1],)}
        if len(got) == len(keys) or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def free(shell: Any, line: str) -> str:
    """Delete what the line names, collect, empty PyTorch's cache; before -> after as text."""
    opts = parse_free(line)
    user_ns = shell.user_ns
    if unknown := [n for n in opts.names if n not in user_ns]:
        raise UsageError(f"%gpumon free: no variable named {', '.join(unknown)}; nothing was deleted")
    before, used_before = _readings(), _nvml_used()
    for name in opts.names:
        del user_ns[name]
    if opts.outputs and shell.displayhook.do_full_cache:
        shell.displayhook.flush()  # Out, _N, _, __ and ___
    if opts.traceback:
        for attr in ("last_traceback", "last_value", "last_type", "last_exc"):
            if hasattr(sys, attr):
                setattr(sys, attr, None)
        # IPython's traceback formatters keep the last traceback (``.tb``), and with it its frames.
        for formatter in filter(None, (getattr(shell, n, None) for n in ("InteractiveTB", "SyntaxTB"))):
            for obj in (formatter, *vars(formatter).values()):
                if "tb" in getattr(obj, "__dict__", {}):
                    obj.tb = None
    gc.collect()
    if torch := _cuda():
        torch.cuda.empty_cache()
    after, used_after = _readings(), _nvml_used()
    freed = [*opts.names, *(["the output cache"] if opts.outputs else []),
             *(["the last traceback"] if opts.traceback else [])]
    lines = [f"nbgpu: freed {', '.join(freed)}"]
    lines.extend(f"nbgpu: NVML used, GPU {k}: {fmt_bytes(v)} -> {fmt_bytes(used_after.get(k))}"
                 for k, v in used_before.items())
    lines.extend(f"nbgpu: PyTorch {k}: {fmt_bytes(before[k])} -> {fmt_bytes(after[k])}" for k in before)
    return "\n".join(lines)
