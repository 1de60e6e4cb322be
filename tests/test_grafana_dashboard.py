"""The Grafana dashboard in dashboards/: every metric its queries name is one the exporter serves."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.exporter import prometheus_text

DASHBOARD = Path(__file__).parent.parent / "dashboards" / "nbgpu-grafana.json"
# PromQL words that are not metric names: operators, modifiers, aggregation keywords.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
            "and", "or", "unless"}


def queries(node: object) -> list[str]:
    """Every PromQL expression of the dashboard: panel targets and templating queries."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                found.append(value)
            else:
                found += queries(value)
    elif isinstance(node, list):
        for item in node:
            found += queries(item)
    return found


def metric_names(expr: str) -> set[str]:
    """Metric names an expression reads (functions, labels, strings and keywords left out)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    expr = re.sub(r"label_values\(([^,()]+)(?:,[^)]*)?\)", r"\1", expr)
    expr = re.sub(r"\$\w+", " ", expr)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        tail = expr[m.end():].lstrip()
        if tail.startswith("(") or m.group(0) in KEYWORDS:
            continue
        names.add(m.group(0))
    return names


def served_names() -> set[str]:
    """Names in what the exporter serves for simulated H200s driven by a fake clock."""
    now = [time.time()]
    clock = lambda: now[0]  # noqa: E731 - one fake clock for the GPUs and the sampler
    s = Sampler(SimulatedGPUs(count=2, seed=5, clock=clock), interval=0.5, host=False, clock=clock)
    try:
        for _ in range(12):
            now[0] += 0.5
            s.step(now[0])
        text = prometheus_text(s, "h")
    finally:
        s.stop()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines()
            if line and not line.startswith("#")}


def test_every_query_names_only_metrics_the_exporter_serves():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = queries(dashboard)
    assert len(exprs) >= 10
    served = served_names()
    named = set()
    for expr in exprs:
        names = metric_names(expr)
        assert names, f"a query that names no metric: {expr}"
        assert names <= served, f"{expr}: {sorted(names - served)} not served by nbgpu's exporter"
        named |= names
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "nbgpu_gpu_info"} <= named


def test_the_name_check_catches_an_unknown_metric():
    assert metric_names('rate(DCGM_FI_DEV_NOPE{gpu=~"$gpu"}[5m]) * on(gpu) nbgpu_x') == {
        "DCGM_FI_DEV_NOPE", "nbgpu_x"}
    assert metric_names("label_values(nbgpu_gpu_info, Hostname)") == {"nbgpu_gpu_info"}
