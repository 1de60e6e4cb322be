"""Per-cell profiles: ``%%gpumon`` (one cell) and ``%gpumon --cells`` (every cell)."""

from __future__ import annotations

import ast
import contextlib
import logging
import math
import time
from collections.abc import Callable
from html import escape

from IPython.display import display

from ..config import settings
from ..diagnostics.stacks import CATEGORIES, LABELS
from ..hooks import view
from ..sampler import Sampler
from ..units import fmt_duration, fmt_energy
from .capture import Capture, status_of
from .comparison import changes
from .cost import cost_of
from .history import CellRecord, earlier
from .history import add as add_record
from .oom import OomStory, PostMortem, build_story, is_oom
from .render import compact_html

log = logging.getLogger("nbgpu")

SPLIT_MOVED = 0.1  # a category whose share moved this much (of the cell's time) is named

_mode: _CellMode | None = None


def _cell_id(shell, info=None) -> str | None:
    """The front end's id of the running cell (``info.cell_id`` or the request's metadata)."""
    cid = getattr(info, "cell_id", None)
    if not cid:
        with contextlib.suppress(Exception):  # no kernel, or a request without metadata
            cid = shell.kernel.get_parent()["metadata"].get("cellId")
    return str(cid) if cid else None


def current_count(shell) -> int | None:
    """The In [] number of the running cell, as the front end shows it."""
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    counts = (getattr(result, "execution_count", None), getattr(shell, "execution_count", None))
    return next((c for c in counts if isinstance(c, int)), None)


def against_last(rec: CellRecord) -> str:
    """What changed since the cell's last run, "" if none: ``vs its last run (In [3], 2m05s ago): 12 %
    more energy, ...; main thread: data loader 81 % → 9 %``, then a line per finding gone, new or kept."""
    runs = earlier(rec)
    if not runs:
        return ""
    prev = runs[-1]
    try:
        found = changes(prev.figures().total, rec.figures().total, repeats=[r.figures().total for r in runs])
        parts = [", ".join(f"utilisation {c.before.value:.0f} % → {c.after.value:.0f} %"  # from what to what
                           if c.metric == "util_mean_pct" and c.beyond_noise else c.phrase for c in found)]
        a, b = prev.tail(), rec.tail()
        alerts = rec.capture.alerts
    except Exception as exc:  # an old run whose readings are gone: say so, briefly
        return f"vs its last run: cannot compare ({exc})"
    steps = a.get("steps_per_s"), b.get("steps_per_s")
    if all(isinstance(v, (int, float)) and v > 0 for v in steps):
        parts.append(f"steps a second {steps[0]:.3g} → {steps[1]:.3g} ({steps[1] / steps[0]:.2g}×)")
    shares = [(c, a.get(f"share_{c}"), b.get(f"share_{c}")) for c in CATEGORIES]
    if all(isinstance(x, (int, float)) and isinstance(y, (int, float)) for _, x, y in shares):
        moved = sorted((s for s in shares if abs(s[2] - s[1]) >= SPLIT_MOVED),
                       key=lambda s: -abs(s[2] - s[1]))[:3]
        parts.append("main thread: " + ", ".join(f"{LABELS[c]} {100 * x:.0f} % → {100 * y:.0f} %"
                                                 for c, x, y in moved) if moved else "main thread the same")
    before = {r for r in str(a.get("alert_rules") or "").split(", ") if r}
    now = {alert.rule: alert.message for alert in reversed(alerts)}  # each rule's first
    where = f"In [{prev.execution_count}], " if prev.execution_count is not None else ""
    ago = fmt_duration(rec.start_time - prev.start_time)
    return "\n".join([f"vs its last run ({where}{ago} ago): " + "; ".join(parts),
                      *(f"{r}: gone" for r in sorted(before - set(now))),
                      *(f"{r}: {'still there' if r in before else 'new'}, {m}"
                        for r, m in sorted(now.items()))])


def _show_one_line(cap: Capture, note: str = "") -> None:
    """The ``--cells`` line: plain text, and HTML whose click opens the report."""
    html = compact_html(cap)
    if note:
        html += f'<p class="nbgpu-compare" style="margin:0;font-size:12px">{escape(note)}</p>'
    display({"text/plain": cap.one_line() + (f" · {note}" if note else ""), "text/html": html}, raw=True)


def _oom_story(cap: Capture, exc: BaseException | None) -> OomStory | None:
    """The memory story of an out-of-memory ``exc``, gathered now while its frame still holds memory."""
    if exc is None or not is_oom(exc):
        return None
    try:
        return build_story(cap, exc)
    except Exception as err:
        log.warning("nbgpu: the out-of-memory story could not be gathered: %s", err)
        return None


class _CellMode:
    """The pre/post cell hooks of ``%gpumon --cells``."""

    def __init__(self, shell, get_sampler: Callable[[], Sampler], min_duration_s: float | None) -> None:
        self.shell = shell
        self.get_sampler = get_sampler
        self.min_duration_s = min_duration_s  # None: NbGpu.cells_min_s as it is at each cell
        self.pending: list[tuple[Capture, object]] = []
        self.skip_current = False
        self.failed_once = False

    def pre_run_cell(self, info) -> None:
        cap = None
        if not getattr(info, "silent", False) and getattr(info, "store_history", True):
            try:
                sampler = self.get_sampler()
            except Exception as exc:
                if not self.failed_once:
                    self.failed_once = True
                    log.warning("nbgpu: cell profiles are off for now: %s", exc)
            else:
                cap = Capture(sampler).start()
        self.pending.append((cap, info))

    def post_run_cell(self, result) -> None:
        if not self.pending:
            return
        cap, info = self.pending.pop()
        if cap is None:
            return
        error = getattr(result, "error_in_exec", None) or getattr(result, "error_before_exec", None)
        skip, self.skip_current = self.skip_current, False
        story = None if skip else _oom_story(cap, error)
        least_s = settings().cells_min_s if self.min_duration_s is None else self.min_duration_s
        long_enough = story is not None or time.time() - cap.start_time >= least_s
        cap.finish(status_of(error), error, wait=long_enough and not skip)
        if skip:  # %%gpumon profiled this cell itself
            return
        rec = CellRecord(getattr(result, "execution_count", None), _cell_id(self.shell, info),
                         getattr(info, "raw_cell", "") or "", cap)
        # no GPU visible: nothing worth a line
        _record_and_show(rec, story, "line" if long_enough and cap.sampler.devices else "")


def enable_cell_mode(shell, get_sampler: Callable[[], Sampler],
                     min_duration_s: float | None = None) -> None:
    """Profile every cell from now on (``%gpumon --cells``); calling again updates the threshold
    (None: ``NbGpu.cells_min_s``)."""
    global _mode
    if _mode is not None and _mode.shell is shell:
        _mode.get_sampler, _mode.min_duration_s = get_sampler, min_duration_s
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
        with contextlib.suppress(ValueError):
            mode.shell.events.unregister(name, fn)


def cell_mode_enabled() -> bool:
    return _mode is not None


def _run_body(shell, cell: str):
    """Run the cell body in the user's namespace like a cell: the last expression is displayed."""
    source = shell.transform_cell(cell)
    filename = shell.compile.cache(source, current_count(shell) or 0, raw_code=cell)
    tree = shell.transform_ast(shell.compile.ast_parse(source, filename=filename))
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    exec(compile(tree, filename, "exec"), shell.user_ns)
    if last is not None:  # "single" displays the value
        exec(compile(ast.Interactive(body=[last]), filename, "single"), shell.user_ns)


def run_profiled_cell(shell, cell: str, sampler: Sampler, gpus: list | None = None) -> Capture:
    """Run ``cell`` (the body of ``%%gpumon``) and show its report; returns the capture."""
    if _mode is not None:
        _mode.skip_current = True
    cap = Capture(sampler, gpus=gpus)
    cap.line_offset = 1  # the body's line 1 is the cell's line 2, under %%gpumon
    cap.start()
    error = story = None
    try:
        _run_body(shell, cell)
    except BaseException as exc:
        error, story = exc, _oom_story(cap, exc)
        raise  # the user's exception, unchanged: same object, same traceback
    finally:
        cap.finish(status_of(error), error)
        _record_and_show(CellRecord(current_count(shell), _cell_id(shell), cell, cap), story, "report")
    return cap


def _record_and_show(rec: CellRecord, story: OomStory | None, show: str) -> None:
    """Record the cell, then show: the OOM story first (if any), then ``show``: "line" (``--cells``),
    "report" (the cell report and the comparison, ``%%gpumon``) or "" (nothing)."""
    add_record(rec)
    cap = rec.capture
    if not show:
        return
    if story is not None:
        try:
            display(view("oom_report", PostMortem(cap, story)))
        except Exception as exc:  # never hide the user's own error behind ours
            log.warning("nbgpu: the out-of-memory report could not be shown: %s", exc)
    if show == "line":
        try:
            _show_one_line(cap, against_last(rec))
        except Exception as exc:  # never disturb the user's cell over a summary
            log.debug("cell summary failed: %s", exc)
        return
    try:
        display(view("cell_report", cap))
        joules = cap.totals.get("energy_j", math.nan)
        cost = f"energy {fmt_energy(joules)} = {cost_of(joules).text()}"
        notes = [part for line in (against_last(rec), cost) if line for part in line.split("\n")]
        html = "".join(f'<p class="nbgpu-compare" style="margin:2px 0;font-size:12px">{escape(line)}</p>'
                       for line in notes)
        display({"text/plain": "\n".join(notes), "text/html": html}, raw=True)
    except Exception as exc:  # the report must never hide the cell's own outcome
        log.warning("nbgpu: the cell report could not be shown: %s", exc)
