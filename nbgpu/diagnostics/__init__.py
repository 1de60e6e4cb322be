"""Diagnostics: name the problem, not just the number.

A ``DiagnosticsEngine`` in each sampler's thread runs the ``RULES`` on the recent store and, while
a cell runs, its main thread's stacks; each episode raises one ``Alert``. ``memory_owners(sampler)``
says whose memory it is.
"""

from __future__ import annotations

from .alerts import SEVERITIES, Alert, alerts_frame
from .engine import RULE_FUNCTIONS, DiagnosticsEngine, attach, register_activity
from .owners import MemoryOwners, memory_owners
from .thresholds import RULES, Thresholds

__all__ = ["RULES", "RULE_FUNCTIONS", "SEVERITIES", "Alert", "DiagnosticsEngine", "MemoryOwners",
           "Thresholds", "alerts_frame", "attach", "memory_owners", "register_activity"]
