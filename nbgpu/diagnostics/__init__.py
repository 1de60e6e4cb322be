"""Diagnostics: name the problem, not just the number.

Each ``Sampler`` runs a ``DiagnosticsEngine`` in its thread. Rules (OOM risk, memory leak,
input-bound, idle, imbalance, throttling, busy-but-thin) read the recent store, and each
episode raises one ``Alert``. ``memory_owners(sampler)`` says whose memory it is.
Importing this package registers ``attach`` with the sampler (``nbgpu.Sampler`` does so).
"""

from __future__ import annotations

from ..sampler import set_diagnostics_factory
from .alerts import SEVERITIES, Alert, alerts_frame
from .engine import RULE_FUNCTIONS, DiagnosticsEngine, attach, register_activity
from .owners import MemoryOwners, memory_owners
from .thresholds import RULES, Thresholds

set_diagnostics_factory(attach)  # every Sampler(diagnostics=True) from now on gets an engine

__all__ = ["RULES", "RULE_FUNCTIONS", "SEVERITIES", "Alert", "DiagnosticsEngine", "MemoryOwners",
           "Thresholds", "alerts_frame", "attach", "memory_owners", "register_activity"]
