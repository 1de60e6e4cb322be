"""Per-cell profiles: ``%%gpumon`` (one cell) and ``%gpumon --cells`` (every cell).

The cell hooks only take timestamps, ask the sampler thread for an energy reading and
append a record: no NVML call, no summary. Cells at least ``min_duration_s`` long then
get a one-line summary whose click opens the picture and table; shorter ones stay quiet
and are summarised only when ``nbgpu.history()`` asks.
"""

from __future__ import annotations

import ast
import logging
import time
from collections.abc import Callable

from ..sampler import Sampler
from .capture import Capture, status_of
from .history import CellRecord
from .history import add as add_record

log = logging.getLogger("nbgpu")

DEFAULT_MIN_DURATION_S = 1.0

_mode: _CellMode | None = None


def _cell_id(shell, info=None) -> str | None:
    """The front end's id of the running cell (``info.cell_id`` or the request's metadata)."""
    cid = getattr(info, "cell_id", None)
    if cid:
        return str(cid)
    kernel = getattr(shell, "kernel", None)
    try:
        parent = kernel.get_parent() if kernel is not None else None
    except Exception:
        parent = None
    if isinstance(parent, dict):
        cid = (parent.get("metadata") or {}).get("cellId")
    return str(cid) if cid else None


def _display(obj) -> None:
    from IPython.display import display

    display(obj)


class _OneLine:
    """Display data of the ``--cells`` line: plain text, and HTML whose click opens the report."""

    def __init__(self, cap: Capture) -> None:
        self.cap = cap

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        from .report import compact_html

        return {"text/plain": self.cap.one_line(), "text/html": compact_html(self.cap)}


def _show_one_line(cap: Capture) -> None:
    _display(_OneLine(cap))


class _CellMode:
    """The pre/post cell hooks of ``%gpumon --cells``."""

    def __init__(self, shell, get_sampler: Callable[[], Sampler], min_duration_s: float) -> None:
        self.shell = shell
        self.get_sampler = get_sampler
        self.min_duration_s = float(min_duration_s)
        self.pending: list[tuple[Capture, object]] = []
        self.skip_current = False
        self.failed_once = False

    def pre_run_cell(self, info) -> None:
        if getattr(info, "silent", False) or not getattr(info, "store_history", True):
            self.pending.append((None, info))
            return
        try:
            sampler = self.get_sampler()
        except Exception as exc:
            if not self.failed_once:
                self.failed_once = True
                log.warning("nbgpu: cell profiles are off for now: %s", exc)
            self.pending.append((None, info))
            return
        cap = Capture(sampler, label="")
        cap.start()
        self.pending.append((cap, info))

    def post_run_cell(self, result) -> None:
        if not self.pending:
            return
        cap, info = self.pending.pop()
        if cap is None:
            return
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        long_enough = time.time() - cap.start_time >= self.min_duration_s
        skip, self.skip_current = self.skip_current, False
        cap.finish(status_of(type(error) if error is not None else None), error,
                   wait=long_enough and not skip)
        if skip:  # %%gpumon profiled this cell itself
            return
        add_record(CellRecord(getattr(result, "execution_count", None),
                                         _cell_id(self.shell, info),
                                         getattr(info, "raw_cell", "") or "", cap))
        if long_enough and cap.sampler.devices:  # no GPU visible: nothing worth a line
            try:
                _show_one_line(cap)
            except Exception as exc:  # never disturb the user's cell over a summary
                log.debug("cell summary failed: %s", exc)


def enable_cell_mode(shell, get_sampler: Callable[[], Sampler],
                     min_duration_s: float = DEFAULT_MIN_DURATION_S) -> None:
    """Profile every cell from now on (``%gpumon --cells``); calling again updates the threshold."""
    global _mode
    if _mode is not None and _mode.shell is shell:
        _mode.get_sampler, _mode.min_duration_s = get_sampler, float(min_duration_s)
        return
    disable_cell_mode(shell)
    _mode = _CellMode(shell, get_sampler, min_duration_s)
    shell.events.register("pre_run_cell", _mode.pre_run_cell)
    shell.events.register("post_run_cell", _mode.post_run_cell)


def disable_cell_mode(shell) -> None:
    """Stop profiling every cell (``%gpumon --cells off``, ``%unload_ext``); history stays."""
    global _mode
    if _mode is None:
        return
    mode, _mode = _mode, None
    for name, fn in (("pre_run_cell", mode.pre_run_cell), ("post_run_cell", mode.post_run_cell)):
        try:
            mode.shell.events.unregister(name, fn)
        except ValueError:
            pass


def cell_mode_enabled() -> bool:
    return _mode is not None


def _run_body(shell, cell: str):
    """Run the cell body in the user's namespace like a cell: the last expression is displayed."""
    source = shell.transform_cell(cell)
    filename = shell.compile.cache(source, shell.execution_count, raw_code=cell)
    tree = shell.compile.ast_parse(source, filename=filename)
    tree = shell.transform_ast(tree)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Interactive(body=[tree.body.pop()])
    ns = shell.user_ns
    exec(compile(tree, filename, "exec"), ns)
    if last is not None:
        exec(compile(last, filename, "single"), ns)  # "single" displays the value


def run_profiled_cell(shell, cell: str, sampler: Sampler, gpus: list | None = None) -> Capture:
    """Run ``cell`` (the body of ``%%gpumon``) and show its report; returns the capture.

    The report is shown whether the cell succeeds, raises or is interrupted; the cell's
    exception then propagates unchanged.
    """
    if _mode is not None:
        _mode.skip_current = True
    cap = Capture(sampler, gpus=gpus)
    cap.start()
    try:
        _run_body(shell, cell)
    except BaseException as exc:
        cap.finish(status_of(type(exc)), exc)
        _record_and_show(shell, cell, cap)
        raise
    cap.finish("ok")
    _record_and_show(shell, cell, cap)
    return cap


def _record_and_show(shell, cell: str, cap: Capture) -> None:
    add_record(CellRecord(getattr(shell, "execution_count", None), _cell_id(shell),
                                     cell, cap))
    try:
        from ..hooks import view

        _display(view("cell_report", cap))
    except Exception as exc:  # the report must never hide the cell's own outcome
        log.warning("nbgpu: the cell report could not be shown: %s", exc)
