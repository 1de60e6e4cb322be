"""Prometheus exporter: a sampler's current GPU readings as dcgm-exporter-compatible text."""

from __future__ import annotations

from .server import DEFAULT_HOST, DEFAULT_PORT, Exporter, serve
from .text import CONTENT_TYPE, FAMILIES, prometheus_text, render

__all__ = ["CONTENT_TYPE", "DEFAULT_HOST", "DEFAULT_PORT", "FAMILIES", "Exporter", "prometheus_text",
           "render", "serve"]
