"""Precision and recall of the diagnoses on the labelled suite (issue 28).

The suite's cells and the findings each must get (``must``), may get (``may``, not
counted) and must not get (anything else) are in ``tests/data/suite/expected.json``,
written before the cells ran. ``scripts/gpu/diagnostics_suite.py`` records each cell on a
real GPU as one recording (``cell-NAME.jsonl``: readings, marks, the stack samples, a
``cell`` event with its span and the findings its report showed). Here each recording is
replayed through the diagnostics (``nbgpu report --diagnose``'s ``judge_cells``) and scored:

    recall    = |found & must| / |must|            (1 when nothing is expected)
    precision = |found & must| / |found - may|     (1 when nothing counted was found)

``python -m benchmarks.diagnostics_suite --recordings DIR [--live DIR/cells.json]`` writes
``benchmarks/results/diagnostics-suite-<device>-<date>.json`` with "precision", "recall"
(over all cells), per-cell detail, device, driver and the recording command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "tests", "data", "suite", "expected.json")
RECORD_COMMAND = "python3 scripts/gpu/diagnostics_suite.py --out $OUT"


CORRECTIONS = os.path.join(os.path.dirname(SUITE), "corrections.json")


def expectations(path: str = SUITE, corrected: bool = True) -> dict[str, dict]:
    """The suite's named cells by name (``must``, ``may``, ``must_not``, ``why``, ``source``),
    with the labels found wrong after a run (``corrections.json``, each with its reason)
    moved where they belong, unless ``corrected`` is False."""
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    cells = {c["name"]: dict(c) for c in doc["cells"] if "name" in c}
    if corrected:
        for fix in corrections(path):
            cell = cells[fix["cell"]]
            for key in ("must", "may", "must_not"):
                moved = [fix["rule"]] if key == fix["now"] else []
                cell[key] = [r for r in cell[key] if r != fix["rule"]] + moved
    return cells


def corrections(suite: str = SUITE) -> list[dict]:
    """The label corrections beside ``suite`` (empty if none)."""
    path = os.path.join(os.path.dirname(suite), "corrections.json")
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)["corrections"]


def score(found: set[str], cell: dict) -> dict:
    """Precision and recall of the rule names ``found`` in one cell against its expectations."""
    must, may = set(cell["must"]), set(cell["may"])
    hits = found & must
    counted = found - may
    return {"precision": len(hits) / len(counted) if counted else 1.0,
            "recall": len(hits) / len(must) if must else 1.0,
            "found": sorted(found), "must": sorted(must), "may": sorted(may),
            "false_positives": sorted(counted - must), "missed": sorted(must - found)}


def outside(findings: list[dict], t0: float, t1: float, tolerance_s: float) -> list[str]:
    """Findings resting on a reading from before the cell or made outside it (should be none;
    ``tolerance_s``, two sampling intervals, allowed at the edges, where the end edge is judged)."""
    bad = []
    for f in findings:
        made, since = f.get("made_s") or [], f.get("since_s") or []
        if any(m < t0 or m > t1 + tolerance_s for m in made) or \
                any(s < t0 - tolerance_s or s > t1 + tolerance_s for s in since):
            bad.append(f["rule"])
    return bad


def replay_recording(path: str, thresholds: dict | None = None) -> list[dict]:
    """Each cell of one recording judged by the diagnostics now: rules found and their evidence."""
    from nbgpu.cli.diagnose import judge_cells
    from nbgpu.runfile import load_run

    run = load_run(path)
    interval = float(run.header.get("interval_s") or 1.0)
    live = {e.get("label"): e for e in run.events if e.get("event") == "cell"}
    out = []
    for c in judge_cells(run, thresholds):
        findings = [{"rule": a.rule, "severity": a.severity, "gpu": a.gpu, "message": a.message,
                     "made_s": [h[0] for h in a.held], "since_s": [h[1] for h in a.held]}
                    for a in c["alerts"]]
        cell_live = live.get(c["cell"], {})
        out.append({"cell": c["cell"], "start_s": c["start_s"], "end_s": c["end_s"],
                    "status": cell_live.get("status"), "findings": findings,
                    "live_findings": cell_live.get("findings") or [],
                    "where": cell_live.get("where"),
                    "outside": outside(findings, c["start_s"], c["end_s"], max(1.0, 2.0 * interval)),
                    "live_outside": outside(cell_live.get("findings") or [], c["start_s"], c["end_s"],
                                            max(1.0, 2.0 * interval))})
    return out


def _totals(cells: list[dict], key: str) -> dict:
    tp = sum(len(set(c[key]["found"]) & set(c[key]["must"])) for c in cells)
    counted = sum(len(set(c[key]["found"]) - set(c[key]["may"])) for c in cells)
    expected = sum(len(c[key]["must"]) for c in cells)
    return {"precision": tp / counted if counted else 1.0, "recall": tp / expected if expected else 1.0,
            "min_cell_precision": min((c[key]["precision"] for c in cells), default=1.0),
            "min_cell_recall": min((c[key]["recall"] for c in cells), default=1.0)}


def score_recordings(folder: str, suite: str = SUITE, thresholds: dict | None = None) -> dict:
    """Replay and score every ``cell-*.jsonl`` in ``folder``; the live findings are scored too,
    and the replay also against the labels as first written (``replay_original``)."""
    expected = expectations(suite)
    original = expectations(suite, corrected=False)
    cells = []
    for path in sorted(glob.glob(os.path.join(folder, "cell-*.jsonl"))):
        for c in replay_recording(path, thresholds):
            exp = expected.get(c["cell"])
            if exp is None:
                continue
            c["replay"] = score({f["rule"] for f in c["findings"]}, exp)
            c["replay_original"] = score({f["rule"] for f in c["findings"]}, original[c["cell"]])
            c["live"] = score({f["rule"] for f in c["live_findings"]}, exp)
            c["recording"] = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
            cells.append(c)
    order = list(expected)
    cells.sort(key=lambda c: order.index(c["cell"]))
    return {"replay": _totals(cells, "replay"), "replay_original": _totals(cells, "replay_original"),
            "live": _totals(cells, "live"), "cells": cells,
            "missing_cells": [n for n in order if n not in {c["cell"] for c in cells}]}


def table(result: dict) -> str:
    """Per-cell precision / recall, replayed and live, as text."""
    lines = [f"{'cell':18} {'replay P':>8} {'R':>5} {'live P':>7} {'R':>5}  replay found / missed"]
    for c in result["cells"]:
        r, v = c["replay"], c["live"]
        lines.append(f"{c['cell']:18} {r['precision']:8.2f} {r['recall']:5.2f} {v['precision']:7.2f} "
                     f"{v['recall']:5.2f}  {','.join(r['found']) or '-'} / {','.join(r['missed']) or '-'}")
    for key in ("replay", "replay_original", "live"):
        t = result[key]
        lines.append(f"{key}: precision {t['precision']:.3f}, recall {t['recall']:.3f} (lowest cell "
                     f"{t['min_cell_precision']:.2f} / {t['min_cell_recall']:.2f})")
    return "\n".join(lines)


def _header(folder: str) -> dict:
    first = sorted(glob.glob(os.path.join(folder, "cell-*.jsonl")))
    if not first:
        return {}
    with open(first[0], encoding="utf-8") as fh:
        return json.loads(fh.readline())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="score the labelled diagnostics suite")
    p.add_argument("--recordings", action="append", default=None, metavar="DIR",
                   help="a folder of cell recordings (repeat for several runs; default: every run "
                        "under tests/data/suite)")
    p.add_argument("--command", default=RECORD_COMMAND, help="the command that recorded the suite")
    p.add_argument("--out", default=None, help="results file (default benchmarks/results/...)")
    p.add_argument("--note", action="append", default=[], help="a line for the results file's notes")
    args = p.parse_args(argv)
    folders = args.recordings or sorted(os.path.dirname(f) for f in glob.glob(
        os.path.join(os.path.dirname(SUITE), "*", "cell-*.jsonl")) if f.endswith("cell-oom.jsonl"))
    runs = []
    for folder in folders:
        result = score_recordings(folder)
        header = _header(folder)
        source = str(header.get("source", ""))
        devices = header.get("devices") or [{}]
        print(f"{folder}:\n{table(result)}")
        runs.append({"recordings": os.path.relpath(folder, ROOT), "device": devices[0].get("name"),
                     "driver": source.split("(driver ")[-1].rstrip(")") if "(driver " in source else None,
                     "source": source, "recorded_at": header.get("timestamp"), **result})
    cells = [c for r in runs for c in r["cells"]]
    doc = {"precision": _totals(cells, "replay")["precision"], "recall": _totals(cells, "replay")["recall"],
           "min_cell_precision": _totals(cells, "replay")["min_cell_precision"],
           "min_cell_recall": _totals(cells, "replay")["min_cell_recall"],
           "original_labels": _totals(cells, "replay_original"),
           "measured_as": ("each recorded cell replayed through this tree's diagnostics as its cell report "
                           "judges it (DiagnosticsEngine.judge_cell), scored against "
                           "tests/data/suite/expected.json with the corrections in corrections.json; "
                           "'original_labels' scores the labels as first written; each run's 'live' is "
                           "what the cell reports showed while recording, with the rules of that moment"),
           "device": runs[0]["device"] if runs else None, "driver": runs[0]["driver"] if runs else None,
           "command": args.command,
           "score_command": "python -m benchmarks.diagnostics_suite " + " ".join(argv or sys.argv[1:]),
           "corrections": corrections(), "notes": args.note, "runs": runs}
    device = (doc["device"] or "unknown").lower()
    slug = "".join(ch if ch.isalnum() else "-" for ch in device).strip("-")
    out = args.out or os.path.join(ROOT, "benchmarks", "results",
                                   f"diagnostics-suite-{slug}-{dt.date.today().isoformat()}.json")
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=str)
    print(f"precision {doc['precision']:.3f}, recall {doc['recall']:.3f}; wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
