"""Render a results file as a Markdown table (what the README's Performance section quotes)."""

from __future__ import annotations

import json
from pathlib import Path

from .report import _fmt


def _value(v: object, unit: str) -> str:
    return "n/a" if v is None else f"{_fmt(float(v))} {unit}".strip()


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|")


def render(path: Path) -> str:
    """Machine, command and every figure and target of one results file, as Markdown."""
    doc = json.loads(Path(path).read_text())
    lines = [f"Results file `{Path(path).as_posix()}`: {doc['device']}"
             + (f", driver {doc['driver']}" if doc.get("driver") else "")
             + f", {doc['host']['cpu_count']} CPU cores ({doc['host']['cpu_model']}), "
             f"{doc['started_utc']}. Command: `{doc['command']}`.", "",
             "| benchmark | figure | value | target | met |", "|---|---|---|---|---|"]
    for name, rec in doc["benchmarks"].items():
        if rec["status"] != "ok":
            lines.append(f"| {name} | {rec['status']}: {_cell(rec.get('reason', ''))} | | | |")
            continue
        for fig, f in rec.get("figures", {}).items():
            lines.append(f"| {name} | {_cell(fig)} | {_value(f['value'], f['unit'])} | | |")
        for t in rec.get("targets", []):
            met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
            value = _value(t["value"], t["unit"])
            lines.append(f"| {name} | {_cell(t['name'])} | {value} | {t['target']} | {met} |")
    return "\n".join(lines)
