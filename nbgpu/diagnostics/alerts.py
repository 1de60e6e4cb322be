"""Alerts, one per episode: a rule's first ``Finding`` on a GPU opens one, later ones refresh it (and
may raise its severity), and it ends after none for ``clear_after_s``: no flapping."""

from __future__ import annotations

import dataclasses
import datetime as _dt
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

SEVERITIES = ("info", "warning", "critical")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}
MAX_HELD = 2000  # findings kept per alert (over an hour at one evaluation every 2 s)
MAX_ALERTS = 1000  # alerts kept (the newest; every open one)
BEFORE_CELL = " (since before this cell)"


@dataclass
class Alert:
    """A diagnosed problem on one GPU over a time span (epoch seconds; ``end`` None while on)."""

    rule: str
    severity: str
    gpu: object
    start: float
    end: float | None
    message: str
    suggestion: str
    evidence: dict = field(default_factory=dict)
    # (evaluated at, judged from, severity, message, evidence) of each finding, oldest first
    held: list = field(default_factory=list, repr=False, compare=False)

    def __str__(self) -> str:
        when = _dt.datetime.fromtimestamp(self.start, _dt.timezone.utc).strftime("%H:%M:%S")
        state = "ongoing" if self.end is None else f"{self.end - self.start:.0f} s"
        return f"[{self.severity}] {self.rule} GPU {self.gpu} since {when} UTC ({state}): {self.message}"


@dataclass
class Finding:
    """What a rule sees on one GPU right now: the alert it would raise."""

    rule: str
    gpu: object
    severity: str
    message: str
    suggestion: str
    evidence: dict
    since: float | None = None  # the oldest reading the judgment rests on (epoch seconds)


class Episodes:
    """Open, refresh and close alerts from findings; keeps the newest ``MAX_ALERTS``."""

    def __init__(self, clear_after_s: float) -> None:
        self.clear_after_s = clear_after_s
        self.alerts: list[Alert] = []
        self._open: dict[tuple[str, object], Alert] = {}
        self._seen: dict[tuple[str, object], float] = {}

    def update(self, findings: list[Finding], now: float, rules: Collection[str]) -> list[Alert]:
        """Apply one evaluation of ``rules``; returns alerts that were opened or escalated."""
        changed = []
        for f in findings:
            key = (f.rule, f.gpu)
            self._seen[key] = now
            alert = self._open.get(key)
            held = (now, now if f.since is None else f.since, f.severity, f.message, dict(f.evidence))
            if alert is None:
                alert = self._open[key] = Alert(f.rule, f.severity, f.gpu, now, None, f.message, f.suggestion,
                                                dict(f.evidence), [held])
                self.alerts.append(alert)
                changed.append(alert)
                continue
            alert.held.append(held)
            del alert.held[:-MAX_HELD]  # nothing until there are more
            if _RANK[f.severity] >= _RANK[alert.severity]:
                alert.message, alert.suggestion, alert.evidence = f.message, f.suggestion, dict(f.evidence)
            if _RANK[f.severity] > _RANK[alert.severity]:
                alert.severity = f.severity
                changed.append(alert)
        for key, alert in list(self._open.items()):
            if key[0] in rules and now - self._seen[key] >= self.clear_after_s:
                alert.end = self._seen[key]
                del self._open[key]
        if len(self.alerts) > MAX_ALERTS:
            self.alerts = [a for a in self.alerts if a.end is None] + \
                [a for a in self.alerts if a.end is not None][-MAX_ALERTS // 2:]
        return changed

    def close_all(self, now: float) -> None:
        """End every open alert (the sampler stopped)."""
        for key, alert in self._open.items():
            alert.end = self._seen.get(key, now)
        self._open.clear()

    def snapshot(self, since_s: float | None = None) -> list[Alert]:
        """Copies of the alerts, oldest first: all, or with ``since_s`` those on or ended at or after
        it (``inf``: those on; only those are copied, as the panel asks every second)."""
        kept = [a for a in self.alerts if since_s is None or a.end is None or a.end >= since_s]
        return [dataclasses.replace(a, evidence=dict(a.evidence), held=list(a.held)) for a in kept]


def judged_in(alerts: list[Alert], t0: float, t1: float, tolerance_s: float = 1.0) -> list[Alert]:
    """A cell's alerts: those with a finding made in it resting on its readings (``tolerance_s`` at
    the edges); one begun before it says so."""
    out = []
    for a in alerts:
        counted = [h for h in a.held if t0 <= h[0] <= t1 + tolerance_s
                   and t0 - tolerance_s <= h[1] <= t1 + tolerance_s]
        if not counted:
            continue
        # the figures of a window wholly inside the cell where there is one, then the worst, the newest
        _, _, severity, message, evidence = max(counted, key=lambda h: (h[1] >= t0, _RANK[h[2]], h[0]))
        before = a.start < t0
        out.append(dataclasses.replace(
            a, severity=severity, message=message + (BEFORE_CELL if before else ""),
            evidence=dict(evidence, since_before_cell=before), held=counted,
            end=a.end if a.end is not None and a.end <= t1 else None))
    return out


def alerts_frame(alerts: list[Alert]) -> pd.DataFrame:
    """Alerts as a DataFrame: one row each, UTC ``start``/``end``, ``duration_s``, ``active``."""
    import pandas as pd

    cols = ["rule", "severity", "gpu", "start", "end", "duration_s", "active", "message",
            "suggestion", "evidence"]
    rows = [(a.rule, a.severity, a.gpu, a.start, a.end, None if a.end is None else a.end - a.start,
             a.end is None, a.message, a.suggestion, a.evidence) for a in alerts]
    df = pd.DataFrame(rows, columns=cols).astype({c: "float64" for c in ("start", "end", "duration_s")})
    return df.assign(**{c: pd.to_datetime(df[c], unit="s", utc=True) for c in ("start", "end")})
