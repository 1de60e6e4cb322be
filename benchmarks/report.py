"""What a benchmark returns, and how a run is written: a table on stdout and one JSON file."""

from __future__ import annotations

import json
import math
import operator
from dataclasses import asdict, dataclass, field
from pathlib import Path

_OPS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt}


class UnavailableError(Exception):
    """Raised by a benchmark that cannot run here; the message is the recorded reason."""


@dataclass
class Target:
    """One figure checked against a goal: ``value op bound`` (``met`` None: not evaluable)."""

    name: str
    value: float
    unit: str
    op: str
    bound: float
    note: str = ""
    met: bool | None = None

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"op must be one of {', '.join(_OPS)}, got {self.op!r}")
        if self.met is None and self.value is not None and math.isfinite(self.value):
            self.met = bool(_OPS[self.op](self.value, self.bound))

    @property
    def target(self) -> str:
        return f"{self.op} {_fmt(self.bound)} {self.unit}".strip()


@dataclass
class Outcome:
    """Everything one benchmark measured: raw figures, checked targets, plain-text notes."""

    raw: dict = field(default_factory=dict)
    targets: list[Target] = field(default_factory=list)
    figures: dict[str, tuple[float, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def figure(self, name: str, value: float, unit: str) -> None:
        """Record a headline figure that has no target (shown in the table)."""
        self.figures[name] = (value, unit)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return "n/a"
        if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:.4g}"
    return str(v)


def _clean(obj: object) -> object:
    """JSON-safe copy: NaN/inf become None, tuples lists, unknown objects their repr."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if hasattr(obj, "item"):  # numpy scalars
        return _clean(obj.item())
    return repr(obj)


def outcome_json(status: str, seconds: float, outcome: Outcome | None, reason: str = "") -> dict:
    """The JSON record of one benchmark's run."""
    rec: dict = {"status": status, "seconds": round(seconds, 3)}
    if reason:
        rec["reason"] = reason
    if outcome is not None:
        rec["figures"] = {k: {"value": v, "unit": u} for k, (v, u) in outcome.figures.items()}
        rec["targets"] = [dict(asdict(t), target=t.target) for t in outcome.targets]
        rec["notes"] = outcome.notes
        rec["raw"] = outcome.raw
    return _clean(rec)


def table(results: dict[str, dict]) -> str:
    """A plain-text table: one line per figure and per target, and one per skipped benchmark."""
    rows = [("benchmark", "figure", "value", "target", "met")]
    for name, rec in results.items():
        if rec["status"] != "ok":
            rows.append((name, rec["status"], "", "", rec.get("reason", "")[:70]))
            continue
        for fig, f in rec.get("figures", {}).items():
            rows.append((name, fig, f"{_fmt(f['value'])} {f['unit']}".strip(), "", ""))
        for t in rec.get("targets", []):
            met = {True: "yes", False: "NO", None: "n/a"}[t["met"]]
            value = "n/a" if t["value"] is None else f"{_fmt(t['value'])} {t['unit']}".strip()
            rows.append((name, t["name"], value, t["target"], met))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write(path: Path, document: dict) -> Path:
    """Write the results document as indented JSON (atomically) and return its path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_clean(document), indent=1, sort_keys=False) + "\n")
    tmp.replace(path)
    return path
