"""Diagnostics: a ``DiagnosticsEngine`` in each sampler's thread runs the ``RULES`` on the recent store
(and a running cell's stacks), one ``Alert`` per episode; ``memory_owners`` says whose memory it is."""

from __future__ import annotations

from .alerts import Alert
from .engine import register_activity
from .owners import memory_owners
from .thresholds import RULES, Thresholds

__all__ = ["RULES", "Alert", "Thresholds", "memory_owners", "register_activity"]
