"""Prometheus exporter: a sampler's newest GPU readings, dcgm-exporter-compatible, over HTTP."""

from __future__ import annotations

from .server import DEFAULT_HOST, DEFAULT_PORT, Exporter, metrics_app, serve
from .text import CONTENT_TYPE, GpuCollector, families, prometheus_text, registry_for, to_text

__all__ = ["CONTENT_TYPE", "DEFAULT_HOST", "DEFAULT_PORT", "Exporter", "GpuCollector", "families",
           "metrics_app", "prometheus_text", "registry_for", "serve", "to_text"]
