"""``nbgpu report --diagnose``: the recorded readings go tick by tick through the live sampler's
``DiagnosticsEngine``, at the recording's own times. A run with ``cell`` events is judged per cell
(work runs only inside them); else the command runs all along and findings go per mark span."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math

import numpy as np

from ..errors import BadArgumentError
from ..files import iso
from ..metrics import GPU_METRICS, HOST_KEY, HOST_METRICS
from ..runfile import Run
from ..sources.base import Device
from ..store import Event, Store
from .report import load_input
from .shared_options import shown

EXIT_MARK = "command exited with code"  # the mark `nbgpu record` ends a run with


def parse_thresholds(items: list[str] | None) -> dict:
    """``NAME=NUMBER`` items as a dict for ``Thresholds``; BadArgumentError naming a bad one."""
    from ..diagnostics.thresholds import Thresholds

    kinds = {f.name: type(f.default) for f in dataclasses.fields(Thresholds)}
    out: dict = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        kind = kinds.get(name.strip())
        try:
            value = float(text) if sep and kind in (int, float) else math.nan
        except ValueError:
            value = math.nan
        if math.isnan(value) or (kind is int and not value.is_integer()):
            raise BadArgumentError(f"--threshold {item!r}: give NAME=NUMBER (whole for counts), e.g. "
                                   "input_util_below_pct=40; names: nbgpu.Thresholds.table()")
        out[name.strip()] = int(value) if kind is int else value
    Thresholds.from_any(out)  # range checks (BadArgumentError)
    return out


class _Replay:
    """What the engine reads of a sampler, over a store filled from a recording (a class: the
    engine keeps weak references to its samplers, which a SimpleNamespace cannot take)."""

    def __init__(self, devices: list[Device], interval: float, engine) -> None:
        self.store, self.devices, self.interval, self.lost = Store(), devices, interval, {}
        self.diagnostics, self.alert_list = engine, engine.alert_list
        self.stack_samples = None  # the recording's main-thread stack samples, if it has any
        self.watch, self.processes = lambda: None, dict  # no one looks; no process lists recorded
        self.drained_until = lambda device, metric=None: math.inf  # every reading is in


def _devices(run: Run, df) -> list[Device]:
    names = {str(d.get("index")): str(d.get("name", "")) for d in run.devices()}
    last = df.reindex(columns=["gpu", "mem_total_bytes", "power_limit_w"]).groupby("gpu", sort=False).last()
    return [Device(key=gpu, name=names.get(str(gpu), ""), mem_total_bytes=None if mem != mem else int(mem),
                   power_limit_w=None if limit != limit else float(limit))
            for gpu, mem, limit in last.astype(float).itertuples()]  # each GPU's newest known values


def cells_of(run: Run) -> list[tuple[str, float, float]]:
    """(label, start, end) of the run's ``cell`` events, in time order; bad ones left out."""
    out = []
    for e in run.events:
        if e.get("event") != "cell":
            continue
        try:
            end = _dt.datetime.fromisoformat(str(e["end"])).timestamp()
        except (KeyError, ValueError, TypeError):
            continue
        if end >= e["time_s"]:
            out.append((str(e.get("label", "")), e["time_s"], end))
    return sorted(out, key=lambda c: c[1])


def _replayed(run: Run, thresholds: dict | None = None) -> _Replay:
    """The replayed sampler (its engine in ``.diagnostics``) after ``run``'s readings went through."""
    from ..diagnostics.engine import DiagnosticsEngine

    engine = DiagnosticsEngine(thresholds)
    df = run.frame
    if not len(df):
        return _Replay([], 1.0, engine)
    df = df[df["gpu"].notna()].copy()
    df["_t"] = df["time"].astype("int64") / 1e9
    df = df.sort_values("_t", kind="stable")
    steps = np.diff(np.unique(df["_t"].to_numpy()))
    sim = _Replay(_devices(run, df), float(np.median(steps)) if len(steps) else 1.0, engine)
    if records := run.stack_samples():
        from ..diagnostics.stacks import StackSamples

        sim.stack_samples = StackSamples()
        for t, category, number, text in records:
            sim.stack_samples.add(t, category, None if number is None else ("", number), text)
    gpu_cols = [m.name for m in GPU_METRICS if m.name in df.columns]
    host_cols = [m.name for m in HOST_METRICS if m.name in df.columns]
    for d in sim.devices:
        sim.store.declare(d.key, "tick", {c: np.float64 for c in gpu_cols})
    if host_cols:
        sim.store.declare(HOST_KEY, "tick", {c: np.float64 for c in host_cols})
    for t, label in sorted(run.marks()):
        sim.store.add_event(Event(t, "mark", label))
    edges = sorted([(t, start) for _, t0, t1 in cells_of(run) for t, start in ((t0, True), (t1, False))],
                   key=lambda e: e[0])
    if not edges:
        engine.cell_running(True)  # the recorded command ran all along
    times, gpus = df["_t"].to_numpy(), df["gpu"].to_numpy()
    values = {c: df[c].to_numpy(dtype=np.float64) for c in gpu_cols + host_cols}
    if "mem_used_bytes" in values and "mem_used_max_bytes" in df:
        # Memory is judged on each tick's peak, as the live rules see every sample.
        peak = df["mem_used_max_bytes"].to_numpy(dtype=np.float64)
        values["mem_used_bytes"] = np.fmax(values["mem_used_bytes"], peak)
    bounds = np.flatnonzero(np.diff(times)) + 1
    for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(times)], strict=True):
        t = float(times[lo])
        while edges and edges[0][0] <= t:
            start = edges.pop(0)[1]
            engine.cell_running(start)
            if not start:
                engine.judge_cell_end()  # as a capture's end asks, at its edge reading
        for i in range(lo, hi):
            sim.store.append_row(gpus[i], "tick", t, {c: values[c][i] for c in gpu_cols})
        if host_cols:
            sim.store.append_row(HOST_KEY, "tick", t, {c: values[c][lo] for c in host_cols})
        engine(sim, t)
    engine.close_all(float(times[-1]) if len(times) else None)
    return sim


def judge_cells(run: Run, thresholds: dict | None = None) -> list[dict]:
    """Per ``cell`` event: label, span, the alerts its report lists and the rules it was too short for."""
    from ..diagnostics.engine import cell_alerts

    sim = _replayed(run, thresholds)
    stacks = sim.stack_samples
    out = []
    for label, t0, t1 in cells_of(run):
        found, short = cell_alerts(sim, t0, t1, stacks.split(t0, t1) if stacks is not None else None)
        out.append({"cell": label, "start_s": t0, "end_s": t1, "alerts": found, "too_short": short})
    return out


def _record(a, cell: str | None) -> dict:
    return {"rule": a.rule, "severity": a.severity, "gpu": a.gpu, "start": iso(a.start, "seconds"),
            "end": None if a.end is None else iso(a.end, "seconds"), "start_s": a.start,
            "end_s": a.end, "message": a.message, "suggestion": a.suggestion, "cell": cell}


def run_diagnose(path: str, threshold_items: list[str] | None = None, as_json: bool = False) -> int:
    """Print the findings of ``path`` per cell, else per mark span; BadArgumentError for bad input."""
    thresholds = parse_thresholds(threshold_items)
    run = load_input(path)
    doc: dict = {"run": path, "thresholds": thresholds}
    if cells_of(run):
        doc["cells"] = cells = judge_cells(run, thresholds)
        for c in cells:
            c["findings"] = [_record(a, c["cell"]) for a in c.pop("alerts")]
        found = [f for c in cells for f in c["findings"]]
        groups = [(f"cell {c['cell']} ({iso(c['start_s'], 'seconds')}, {c['end_s'] - c['start_s']:.1f} s):",
                   c["findings"]) for c in cells]
    else:
        marks = [m for m in sorted(run.marks()) if not m[1].startswith(EXIT_MARK)]  # not a cell
        spans = [(-math.inf, "before the first mark"), *marks] if marks else [(-math.inf, None)]
        found = [_record(a, [name for t, name in spans if t <= a.start][-1])
                 for a in _replayed(run, thresholds).alert_list()]
        groups = [(f"{path}:" if cell is None else f"cell {cell}:", [f for f in found if f["cell"] == cell])
                  for cell in dict.fromkeys(f["cell"] for f in found)] or [(f"{path}:", [])]
    if as_json:
        print(json.dumps({**doc, "findings": found}, default=str))
        return 0
    for head, findings in groups:
        print(shown(head))
        for f in findings:
            print(shown(f"  {f['rule']} [{f['severity']}] GPU {f['gpu']}: {f['message']} "
                        f"({f['start']} to {f['end'] or 'the end'})"))
        if not findings:
            print("  no findings")
    return 0
