"""The diagnostics engine: runs the rules on the store (never NVML) in the sampler thread every
``eval_every_s`` and turns findings into alerts; ``attach`` is ``Sampler(diagnostics=True)``'s factory."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import BadArgumentError
from ..store import MarkFollower
from . import rules
from .alerts import Alert, Episodes, Finding, alerts_frame, judged_in
from .owners import OK, attribute, tree_pids
from .rules_memory import memory_leak, oom_risk
from .stacks import samples_of
from .thresholds import Thresholds
from .window import Context, Window

if TYPE_CHECKING:
    import pandas as pd

    from ..sampler import Sampler

log = logging.getLogger("nbgpu")

# each rule by its name (``thresholds.RULES``)
RULE_FUNCTIONS: dict[str, Callable[[Context], list[Finding]]] = {
    **{rule.__name__: rule for rule in (oom_risk, memory_leak, rules.idle, rules.imbalance, rules.throttling,
                                        rules.busy_thin)},
    **{name: functools.partial(rules.bound, rule=name) for name in rules.BOUND}}
PIDS_EVERY_S = 10.0
JUDGE_MIN_S = 2.0  # a cell shorter than this is too short for any window rule
_WINDOWS = {**dict.fromkeys(rules.BOUND, "input_window_s"), "idle": "idle_window_s", "imbalance":
            "imbalance_window_s", "throttling": "throttle_window_s", "busy_thin": "thin_window_s"}
# Rules judging utilisation up to where it is complete (``Window.end``): while their inputs stay the
# same (utilisation drained every 10 s, rules run every 2 s) their findings are kept, not recomputed.
AT_UTILISATION_END = frozenset(_WINDOWS) - {"throttling"}

_activity_probes: list[Callable[[Sampler], bool]] = []


def register_activity(probe: Callable[[Sampler], bool]) -> Callable[[], None]:
    """Let a higher layer say when work (a capture) runs on a sampler; returns a function removing it."""
    _activity_probes.append(probe)
    return functools.partial(_activity_probes.remove, probe)


def _work_active(sampler: Sampler) -> bool:
    """Whether a registered probe says work (a capture, a profiled cell) runs on this sampler."""
    return any(probe(sampler) for probe in list(_activity_probes))


def _run(name: str, ctx: Context) -> list[Finding] | None:
    """One rule's findings; None where it failed (logged, never raised into the sampler)."""
    try:
        return RULE_FUNCTIONS[name](ctx)
    except Exception:
        log.debug("diagnostics rule %s failed", name, exc_info=True)
        return None


def _judged_from(f: Finding, now: float, th: Thresholds) -> float:
    """The oldest reading a finding rests on: its rule's window, memory's hold, the first mark."""
    ev = f.evidence
    if f.rule == "memory_leak":
        return ev["marks_from_s"] if ev.get("method") == "marks" else now - ev.get("window_s", 0.0)
    if f.rule == "oom_risk":  # the hold its severity needs (memory is above the level now)
        need = th.oom_critical_after_s if f.severity == "critical" else th.oom_warning_after_s
        return now - min(float(ev.get("held_s", 0.0)), need)
    return now - float(getattr(th, _WINDOWS.get(f.rule, ""), 0.0))


def cell_alerts(sampler: Sampler, t0: float, t1: float, split: object = None,
                finished: bool = True) -> tuple[list[Alert], list[str]]:
    """A cell's alerts (``judged_in``; once finished, plus ``judge_span`` for window rules that
    found nothing), at most one bottleneck per GPU, and the rules it was too short to judge."""
    found = judged_in(sampler.alert_list(since_s=t0), t0, t1, max(1.0, 2.0 * sampler.interval))
    short: list[str] = []
    if finished and (engine := getattr(sampler, "diagnostics", None)) is not None:
        done = {a.rule for a in found}
        own, short = engine.judge_span(sampler, t0, t1)
        found += [a for a in own if a.rule not in done]
        short = [r for r in short if r not in done]
    return rules.one_bottleneck(found, split), short


def attach(sampler: Sampler, thresholds: Thresholds | dict | None = None) -> DiagnosticsEngine:
    """A DiagnosticsEngine for ``sampler``, added as its tick listener (the sampler's factory)."""
    engine = DiagnosticsEngine(thresholds)
    sampler.add_listener(engine)
    return engine


class DiagnosticsEngine:
    """Names problems from a sampler's recent readings; ``thresholds``: a ``Thresholds``, a dict
    of the fields to change, or None. Add it with ``sampler.add_listener``."""

    def __init__(self, thresholds: Thresholds | dict | None = None) -> None:
        self.thresholds = Thresholds.from_any(thresholds)
        self._episodes = Episodes(self.thresholds.clear_after_s)
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[Alert], None]] = []
        self._last_eval = -math.inf
        self.cell_end_pending = False  # the evaluation ``judge_cell_end`` asked for has not run yet
        self._cells = 0
        self._cell_since: float | None = None
        self._marks = MarkFollower()
        self._memo: dict = {}  # what rules keep between evaluations
        self._spans: dict = {}  # the Window's widest span per (device, metric)
        self._kept: dict[str, tuple[tuple, list[Finding]]] = {}  # rule -> (inputs, findings)
        self._pids: tuple[float, set[int]] = (-math.inf, set())
        self.evaluations = 0
        self.callback_errors = 0
        self.last_callback_error: str | None = None

    def cell_running(self, running: bool = True) -> None:
        """Say a cell started or ended; the idle rule judges only while a cell or capture runs."""
        with self._lock:
            self._cells = self._cells + 1 if running else max(0, self._cells - 1)
            if self._cells == 0:
                self._cell_since = None

    def judge_cell_end(self) -> None:
        """Evaluate at the next step, off schedule, as a cell's end (a cell under 2 s is judged there)."""
        self.cell_end_pending = True

    def on_alert(self, fn: Callable[[Alert], None]) -> None:
        """Call ``fn(alert)`` (in the sampler thread) when an alert opens or its severity rises."""
        if not callable(fn):
            raise BadArgumentError(f"on_alert needs a function taking an Alert, got {fn!r}")
        self._callbacks.append(fn)

    def alert_list(self, since_s: float | None = None) -> list[Alert]:
        """Copies of the alerts, oldest first (``end`` None while on); ``since_s``: see ``snapshot``."""
        with self._lock:
            return self._episodes.snapshot(since_s)

    @property
    def alerts(self) -> pd.DataFrame:
        """``alert_list()`` as a DataFrame (a property, as ``Sampler.alerts``)."""
        return alerts_frame(self.alert_list())

    def close_all(self, now: float | None = None) -> None:
        """End the ongoing alerts (the sampler stopped)."""
        with self._lock:
            self._episodes.close_all(now if now is not None else self._last_eval)

    def __call__(self, sampler: Sampler, now: float) -> None:
        """Listener entry: evaluate if ``eval_every_s`` has passed; while a cell or other work
        runs, keep the sampler's buffers drained live so the rules judge it as it happens."""
        if self._cells or _work_active(sampler):
            sampler.watch()
        cell_end, self.cell_end_pending = self.cell_end_pending, False
        if not cell_end and now - self._last_eval < self.thresholds.eval_every_s - 1e-6:
            return
        self._last_eval = now
        self.evaluate(sampler, now, cell_end)

    def _my_pids(self, now: float) -> set[int]:
        if not 0 <= now - self._pids[0] < PIDS_EVERY_S:  # every 10 s, or the clock went back
            self._pids = (now, tree_pids())
        return self._pids[1]

    def context(self, sampler: Sampler, now: float, thresholds: Thresholds | None = None,
                in_cell_s: float = 0.0) -> Context:
        """What the rules see now: readings, GPUs in use, marks, cell state. With ``thresholds``
        (``judge_span``) readings up to ``now`` count as complete and the running state is untouched."""
        own = thresholds is not None
        th = thresholds if own else self.thresholds
        lost = sampler.lost
        devices = [d for d in sampler.devices if d.key not in lost]
        window = Window(sampler.store, now, max(th.stale_after_s, 2.5 * sampler.interval),
                        tolerance_s=max(1.0, 2.0 * sampler.interval),
                        spans={} if own else self._spans, complete=None if own else sampler.drained_until,
                        keys=tuple(d.key for d in devices if d.parent is None))
        processes, mine = sampler.processes() or None, self._my_pids(now)
        status, _ = attribute(processes, mine)
        # the GPUs this kernel's processes hold memory on; None (judge all) where that cannot be told
        used = {g for g, ps in processes.items() if {p.pid for p in ps} & mine} if status == OK else None
        ctx = Context(now, window, devices, th, in_cell_s, used, status, stacks=samples_of(sampler))
        if own:
            return ctx
        if not (self._cells or _work_active(sampler)):
            self._cell_since = None
        elif self._cell_since is None:
            self._cell_since = now
        # the newest marks at or before now (time, label), oldest first
        newest = ((t, label) for t, label, _ in reversed(self._marks.update(sampler.store)) if t <= now)
        ctx.marks, ctx.memo = list(itertools.islice(newest, th.leak_marks))[::-1], self._memo
        if len(self._memo.get("marks", ())) > 512:
            self._memo["marks"].clear()
        ctx.in_cell_s = now - self._cell_since if self._cell_since is not None else 0.0
        return ctx

    def judge_span(self, sampler: Sampler, t0: float, t1: float) -> tuple[list[Alert], list[str]]:
        """Judge a cell [t0, t1] alone: each window rule once at its end, its window clipped to the
        cell. Returns the alerts and the rules it was too short to judge."""
        wanted = sorted(r for r in _WINDOWS if r not in self.thresholds.disabled)
        seconds = t1 - t0
        if not wanted or seconds < JUDGE_MIN_S:
            return [], wanted
        th = dataclasses.replace(self.thresholds, **{
            _WINDOWS[r]: min(getattr(self.thresholds, _WINDOWS[r]), seconds) for r in wanted})
        ctx = self.context(sampler, t1, th, in_cell_s=seconds)
        if all(ctx.window.recent(d.key, "util_pct", seconds) is None for d in ctx.gpus()):
            return [], wanted
        out = []
        for name in wanted:
            span = getattr(th, _WINDOWS[name])
            whole = getattr(self.thresholds, _WINDOWS[name])
            clipped = f" (judged on the cell's {span:.1f} s)" if span < whole else ""
            for f in _run(name, ctx) or []:
                message, evidence = f.message + clipped, dict(f.evidence, judged_on_s=round(span, 2))
                out.append(Alert(f.rule, f.severity, f.gpu, t1 - span, t1, message, f.suggestion,
                                 evidence, [(t1, t1 - span, f.severity, message, evidence)]))
        return out, []

    def evaluate(self, sampler: Sampler, now: float, cell_end: bool = False) -> list[Alert]:
        """Run every enabled rule once (``cell_end``: at a cell's end edge); returns the alerts
        opened or escalated."""
        ctx = self.context(sampler, now)
        ctx.cell_end = cell_end
        enabled = [r for r in RULE_FUNCTIONS if r not in self.thresholds.disabled]  # in one order
        findings: list[Finding] = []
        # what the ``AT_UTILISATION_END`` rules read besides the store up to those ends
        inputs = (tuple((d.key, ctx.window.end(d.key, "util_pct")) for d in ctx.devices), ctx.gpus_in_use,
                  ctx.attribution, self._cell_since, ctx.thresholds)
        for name in enabled:
            at_end = name in AT_UTILISATION_END
            if at_end and (kept := self._kept.get(name)) is not None and kept[0] == inputs:
                findings += kept[1]
                continue
            if (found := _run(name, ctx)) is None:
                continue
            for f in found:  # utilisation rules judge the window ending where it was drained
                end = ctx.window.end(f.gpu, "util_pct") if at_end and f.gpu is not None else now
                f.since = _judged_from(f, end, self.thresholds)
            findings += found
            if at_end:
                self._kept[name] = (inputs, found)
        with self._lock:
            changed = self._episodes.update(findings, now, enabled)
            self.evaluations += 1
        for alert in changed:
            self._notify(alert)
        return changed

    def _notify(self, alert: Alert) -> None:
        for fn in list(self._callbacks):
            try:
                fn(dataclasses.replace(alert, evidence=dict(alert.evidence)))
            except Exception as exc:  # a callback never kills the sampler
                self.callback_errors += 1
                self.last_callback_error = f"on_alert {getattr(fn, '__name__', fn)}: {exc}"
                if self.callback_errors == 1:
                    log.warning("%s (further callback errors are only counted)", self.last_callback_error)
