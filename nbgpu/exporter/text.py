"""Current readings of a sampler in the Prometheus text exposition format (version 0.0.4).

Metrics that dcgm-exporter also exports keep its names, units and labels (``gpu``,
``UUID``, ``device``, ``Hostname``), so dashboards built for it work unchanged; nbgpu's
other metrics are named ``nbgpu_gpu_*`` in base units. Only GPU readings are exported:
no host processes, no command lines, no user names.

One deliberate difference: dcgm-exporter's ``modelName`` label is camelCase, which
``promtool check metrics`` rejects, so the model is labelled ``model_name`` unless the
caller asks for ``model_label="modelName"``.
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..metrics import GPU_METRICS, Metric

if TYPE_CHECKING:
    from ..sampler import Sampler

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# nbgpu's name suffix -> Prometheus base-unit suffix, for metrics dcgm-exporter lacks.
_SUFFIXES = (
    ("_bytes_per_s", "_bytes_per_second", 1.0),
    ("_bytes", "_bytes", 1.0),
    ("_pct", "_percent", 1.0),
    ("_w", "_watts", 1.0),
    ("_c", "_celsius", 1.0),
    ("_mhz", "_megahertz", 1.0),
    ("_j", "_joules", 1.0),
)


@dataclass(frozen=True)
class Family:
    """How one nbgpu metric appears in the exposition: name, scale, help text."""

    metric: str
    name: str
    scale: float
    help: str


def _family(m: Metric) -> Family:
    if m.dcgm:
        unit = {"B": "MiB"}.get(m.unit, m.unit)
        if m.dcgm_scale == 0.01:
            unit = "ratio"
        elif m.dcgm_scale == 1000.0:
            unit = "mJ"
        return Family(m.name, m.dcgm, m.dcgm_scale, f"{m.description} (in {unit}).")
    for suffix, prom, scale in _SUFFIXES:
        if m.name.endswith(suffix):
            return Family(m.name, "nbgpu_gpu_" + m.name[: -len(suffix)] + prom, scale,
                          f"{m.description} (in {m.unit}).")
    return Family(m.name, "nbgpu_gpu_" + m.name, 1.0, f"{m.description} ({m.unit}).")


FAMILIES: tuple[Family, ...] = tuple(_family(m) for m in GPU_METRICS)
INFO_NAME = "nbgpu_gpu_info"


def escape_label(value: object) -> str:
    """A label value escaped for the text format (backslash, quote, newline)."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(v: float) -> str:
    """A sample value as the text format writes it (integers without a fraction)."""
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 2**53:
        return str(int(v))
    return repr(float(v))


def device_labels(device: dict, hostname: str, model_label: str = "model_name") -> dict[str, str]:
    """dcgm-exporter's labels for one device (MIG slices add ``GPU_I_ID``)."""
    key = device["index"]
    parent = device.get("parent")
    gpu = parent if device.get("mig") and parent is not None else key
    labels = {"gpu": str(gpu), "UUID": str(device.get("uuid", "")), "device": f"nvidia{gpu}",
              model_label: str(device.get("name", "")), "Hostname": hostname}
    if device.get("mig"):
        labels["GPU_I_ID"] = str(key).rsplit("/", 1)[-1]
    return labels


def _label_text(labels: dict[str, str]) -> str:
    return ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())


def render(rows: list[tuple[dict, dict]], hostname: str | None = None,
           model_label: str = "model_name", driver: str = "") -> str:
    """Exposition text for ``(device info, {metric: value})`` pairs; NaN values are left out."""
    host = hostname or socket.gethostname()
    labelled = [(_label_text(device_labels(d, host, model_label)), d, values) for d, values in rows]
    out: list[str] = []
    for fam in FAMILIES:
        lines = []
        for labels, _d, values in labelled:
            v = values.get(fam.metric)
            if v is None or v != v:
                continue
            lines.append(f"{fam.name}{{{labels}}} {format_value(float(v) * fam.scale)}")
        if lines:
            out.append(f"# HELP {fam.name} {fam.help}")
            out.append(f"# TYPE {fam.name} gauge")
            out.extend(lines)
    if labelled:
        out.append(f"# HELP {INFO_NAME} Devices nbgpu exports (value is always 1).")
        out.append(f"# TYPE {INFO_NAME} gauge")
        for labels, d, _values in labelled:
            extra = {"driver_version": driver, "simulated": "true" if d.get("simulated") else "false"}
            out.append(f"{INFO_NAME}{{{labels},{_label_text(extra)}}} 1")
    return "\n".join(out) + "\n" if out else ""


def prometheus_text(sampler: Sampler, hostname: str | None = None,
                    model_label: str = "model_name") -> str:
    """The sampler's newest reading of every live GPU as Prometheus exposition text."""
    by_key = {d["index"]: d for d in sampler.devices}
    rows = []
    for row in sampler.latest():
        if row["state"] == "lost" or row["gpu"] not in by_key:
            continue
        rows.append((by_key[row["gpu"]], row))
    driver = str(getattr(sampler.source, "driver_version", "") or "")
    return render(rows, hostname, model_label, driver)
