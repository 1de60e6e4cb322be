"""Diagnostics: name the problem, not just the number.

Each ``Sampler`` runs a ``DiagnosticsEngine`` in its thread. Rules (OOM risk, memory leak,
input-, launch- and sync-bound, idle, imbalance, throttling, busy-but-thin) read the recent
store and, while a cell runs, where its main thread was (``stacks``); each episode raises
one ``Alert``. ``memory_owners(sampler)`` says whose memory it is.
Every ``Sampler(diagnostics=True)`` attaches an engine with ``attach`` when it is made.
"""

from __future__ import annotations

from .alerts import SEVERITIES, Alert, alerts_frame
from .engine import RULE_FUNCTIONS, DiagnosticsEngine, attach, register_activity
from .owners import MemoryOwners, memory_owners
from .thresholds import RULES, Thresholds

__all__ = ["RULES", "RULE_FUNCTIONS", "SEVERITIES", "Alert", "DiagnosticsEngine", "MemoryOwners",
           "Thresholds", "alerts_frame", "attach", "memory_owners", "register_activity"]
