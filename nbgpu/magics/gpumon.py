"""``%gpumon`` (live panel, stop, status, per-cell mode) and ``%%gpumon`` (profile one cell)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing

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
from .options import HelpRequestedError, Options, line_parser, parse_cell_line, parse_line

STARTER_THREAD = "nbgpu-start"  # opens the source and starts the sampler beside the imports


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
            from .memory import free, memory_text

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
