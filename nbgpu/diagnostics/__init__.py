"""Diagnostics: a ``DiagnosticsEngine`` in each sampler's thread runs the ``RULES`` on the recent store
(and a running cell's stacks), one ``Alert`` per episode; ``memory_owners`` says whose memory it is."""

from __future__ import annotations

from .alerts import SEVERITIES, Alert, alerts_frame
from .engine import RULE_FUNCTIONS, DiagnosticsEngine, attach, register_activity
from .owners import MemoryOwners, memory_owners
from .thresholds import RULES, Thresholds

__all__ = ["RULES", "RULE_FUNCTIONS", "SEVERITIES", "Alert", "DiagnosticsEngine", "MemoryOwners",
           "Thresholds", "alerts_frame", "attach", "memory_owners", "register_activity"]
