"""``%gpumon`` (live panel, stop, status, per-cell mode, ``memory``: which names hold device memory,
``free``: release them) and ``%%gpumon`` (profile one cell)."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from .. import session
from ..config import settings
from ..errors import NbgpuError
from ..sources import sim_count
from ..sources.base import check_gpus
from ..units import fmt_bytes
from ..widgets.columns import shared_or_host_only
from .options import HelpRequestedError, Options, line_parser, parse_cell_line, parse_free, parse_line

STARTER_THREAD = "nbgpu-start"  # opens the source and starts the sampler beside the imports
NVML_WAIT_S = 2.0  # how long free waits for the sampler's fresh read of memory used


def _gpus(opts: Options, prog: str) -> tuple[object, ...] | None:
    """``--gpus`` checked against the GPUs of the source the options name, starting nothing."""
    if opts.gpus is None:
        return None
    shared = session.shared_sampler()
    spec = (opts.source or "auto").strip()
    try:
        if shared is not None and shared.running and opts.source is None:
            devices = shared.devices
        elif spec in ("auto", "nvml"):  # listed, not probed, and kept for the sampler started next
            devices = session.listed_source(spec).devices()
        else:
            from ..sources import open_source

            with closing(open_source(opts.source)) as src:
                devices = src.devices()
    except NbgpuError as exc:
        raise UsageError(f"{prog}: --gpus given but {exc}") from None
    return check_gpus(opts.gpus, [d.key for d in devices if d.parent is None])


def _sampler(opts: Options):
    from .. import flight

    sampler = shared_or_host_only(opts.source, opts.interval)
    flight.resume()  # recording again after a %gpumon stop
    return sampler


def _start_beside_imports(opts: Options) -> Callable[[], object]:
    """Start the shared sampler on a helper thread while the caller imports the panel's modules
    (NVML waits outside the GIL); simulated or running samplers start when the result is called."""
    from .. import diagnostics  # noqa: F401

    shared = session.shared_sampler()
    simulated = (sim_count(opts.source) is not None if opts.source is not None
                 else shared is not None and shared.simulated)
    if simulated or (shared is not None and shared.running):
        return lambda: _sampler(opts)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=STARTER_THREAD)
    started = pool.submit(_sampler, opts)

    def result() -> object:  # the sampler, or the helper's exception raised here
        try:
            return started.result()
        finally:
            pool.shutdown(wait=True)

    return result


def status_text() -> str:
    """What runs: the sampler, its errors per GPU, processes, the panels and per-cell profiling."""
    from ..profiles.cells import cell_mode_enabled
    from ..widgets import registry

    s = session.shared_sampler()
    if s is None:
        lines = ["sampler: not started (%gpumon starts it)"]
    else:
        st = s.status()
        lines = [f"sampler: {st.state}, {st.source_description}, every {s.interval:g} s, {st.ticks} ticks, "
                 f"{st.errors} error(s)" + (f" (last: {st.last_error})" if st.last_error else "")]
        if st.resolution_note:
            lines.append(f"resolution: {st.resolution_note}")
        for gpu in sorted(set(st.errors_by_gpu) | set(st.last_error_by_gpu), key=str):
            last = st.last_error_by_gpu.get(gpu)
            lines.append(f"GPU {gpu}: {st.errors_by_gpu.get(gpu, 0)} error(s)"
                         + (f", last: {last}" if last else ""))
        if st.lost:
            lines.append(f"lost GPUs: {', '.join(str(k) for k in st.lost)}")
        for gpu, procs in sorted(s.processes().items(), key=str):
            held = sum(p.used_bytes for p in procs if p.used_bytes is not None)
            lines.append(f"GPU {gpu} processes: {len(procs)}, holding {fmt_bytes(held)}")
    panels = registry.panels()
    updating = sum(1 for p in panels if p.running)  # the rest: hidden (output cleared) or stopped
    lines.append(f"panels: {updating} updating, {len(panels) - updating + len(registry.stopped())} stopped")
    lines.append(f"per-cell profiles: {'on' if cell_mode_enabled() else 'off'}")
    return "\n".join("nbgpu " + line for line in lines)


def _stop(shell) -> str:
    """Stop every panel, per-cell profiling and the sampler; the line that says so."""
    from .. import flight
    from ..profiles.cells import cell_mode_enabled, disable_cell_mode
    from ..widgets import registry

    n = registry.stop_all()
    cells = cell_mode_enabled()
    if cells:  # otherwise the next profiled cell would start the sampler again
        disable_cell_mode(shell)
    settings().cells = "off"  # the setting says what runs
    session.stop_shared()
    flight.stop(shell)  # a clean stop: the ring is marked closed
    registry.SCHEDULE.wait_idle()  # the panels' timer thread has ended when this returns
    also = " and per-cell profiles" if cells else ""
    return f"nbgpu: stopped the sampler and {n} panel(s){also}; %gpumon starts again."


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


def _nvml_used() -> dict[object, float]:
    """NVML's memory used per GPU from an "edge" read of the running sampler after now; or {}."""
    s = session.shared_sampler()
    if s is None or not s.running:
        return {}
    asked, deadline = time.time(), time.monotonic() + NVML_WAIT_S
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


@magics_class
class GPUMonMagics(Magics):
    """The ``gpumon`` line and cell magics."""

    @line_cell_magic
    def gpumon(self, line: str = "", cell: str | None = None) -> None:
        prog = "%gpumon" if cell is None else "%%gpumon"
        try:
            if cell is None:
                if text := self._line(line):
                    print(text)
                return None
            opts = parse_cell_line(line)
            gpus, sampler = _gpus(opts, prog), _sampler(opts)
        except HelpRequestedError as shown:
            print(shown)
            return None
        except NbgpuError as exc:  # one line for every mistake nbgpu names
            raise UsageError(f"{prog}: {exc}") from None
        from ..profiles.cells import run_profiled_cell

        run_profiled_cell(self.shell, cell, sampler, gpus=list(gpus) if gpus else None)
        return None

    gpumon.__doc__ = line_parser().format_help()  # %gpumon?: every option of both magics

    def _line(self, line: str) -> str:
        word, _, rest = line.strip().partition(" ")
        if word in ("memory", "free"):
            if word == "free":
                return free(self.shell, rest)
            if rest.strip():
                raise UsageError(f"%gpumon memory: takes no options, got {rest.strip()}")
            return memory_text(self.shell.user_ns)
        opts = parse_line(line)
        if opts.action != "start":
            return _stop(self.shell) if opts.action == "stop" else status_text()
        gpus = _gpus(opts, "%gpumon")
        if opts.cells is not None:
            return self._cells(opts)
        starting = _start_beside_imports(opts)
        from ..widgets.monitor import GPUMonitor

        starting()  # the shared sampler started or re-pointed; the panel follows it
        mon = GPUMonitor(gpus=gpus, window_s=opts.window_s, metrics=opts.metrics,
                         refresh_s=opts.refresh_s, start=False)
        display(mon)
        mon.start()  # after the display: a sampler that has read is drawn at once
        return ""

    def _cells(self, opts: Options) -> str:
        from ..profiles.cells import disable_cell_mode, enable_cell_mode

        if opts.cells == "off":
            disable_cell_mode(self.shell)
            settings().cells = "off"  # the setting says what runs (its observer finds it done)
            return "nbgpu: per-cell profiles off (nbgpu.history() keeps the ones made)."
        _sampler(opts)
        enable_cell_mode(self.shell, lambda: shared_or_host_only(None, None), opts.cells_min_s)
        settings().cells = "on"
        return "nbgpu: profiling every cell; %gpumon --cells off stops, nbgpu.history() lists them."
