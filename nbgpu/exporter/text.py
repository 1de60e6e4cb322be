"""A sampler's newest GPU readings as Prometheus metric families: dcgm-exporter's names, units and
labels where it has the metric, else ``nbgpu_gpu_*``; only GPU readings and sampler health; NaN
is left out, never 0. Every GPU series is a gauge (energy too, keeping its name without
``_total``); the model label is ``model_name`` (promtool rejects dcgm's ``modelName``) unless asked."""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Iterable, Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..sources.base import Device
from ..sources.prometheus_names import FAMILIES, INFO_SERIES

if TYPE_CHECKING:
    from ..sampler import Sampler

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# dcgm-exporter's int64 fields: whole numbers in its units (framebuffer MiB truncated, the rest rounded).
WHOLE = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_GPU_TEMP",
                   "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_ENC_UTIL",
                   "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
                   "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_FB_USED"})
_PROFILE = re.compile(r"\b\d+g\.\d+gb\b")  # a MIG profile in a slice's name, e.g. 2g.35gb


def device_labels(device: Device, hostname: str, model_label: str = "model_name") -> dict[str, str]:
    """dcgm-exporter's labels for one device (MIG slices add ``GPU_I_ID``, ``GPU_I_PROFILE``)."""
    labels = {"gpu": str(device.card), "UUID": device.uuid, "device": f"nvidia{device.card}",
              model_label: device.name, "Hostname": hostname}
    if device.parent is not None:
        labels["GPU_I_ID"] = str(device.key).rsplit("/", 1)[-1]
        if profile := _PROFILE.search(device.name):
            labels["GPU_I_PROFILE"] = profile.group(0)
    return labels


def families(rows: list[tuple[Device, dict]], hostname: str | None = None,
             model_label: str = "model_name", simulated: bool = False) -> list[Metric]:
    """Metric families for ``(device, {metric: value})`` pairs; NaN and None values are left out."""
    host = hostname or socket.gethostname()
    labelled = [(device_labels(d, host, model_label), values) for d, values in rows]
    out: list[Metric] = []
    for fam in FAMILIES:
        metric = GaugeMetricFamily(fam.name, fam.help)
        for labels, values in labelled:
            if (v := values.get(fam.metric)) is None or v != v:
                continue
            v = float(v) * fam.scale
            if fam.name in WHOLE:
                v = float(math.floor(v) if fam.name == "DCGM_FI_DEV_FB_USED" else round(v))
            metric.add_sample(fam.name, labels, v)
        if metric.samples:
            out.append(metric)
    if labelled:
        info = GaugeMetricFamily(INFO_SERIES, "Devices nbgpu exports (value is always 1).")
        extra = {"driver_version": "", "simulated": "true" if simulated else "false"}
        for labels, _values in labelled:
            info.add_sample(INFO_SERIES, {**labels, **extra}, 1.0)
        out.append(info)
    return out


def to_text(metrics: Iterable[Metric]) -> str:
    """Exposition text (format 0.0.4) of metric families, written by prometheus-client."""
    fixed = list(metrics)
    return generate_latest(SimpleNamespace(collect=lambda: fixed)).decode()


class GpuCollector:
    """prometheus-client collector of a sampler's newest readings, one snapshot per scrape
    (``hostname``: None is this machine's name; ``model_label``: or dcgm's "modelName")."""

    def __init__(self, sampler: Sampler, hostname: str | None = None,
                 model_label: str = "model_name") -> None:
        self.sampler, self.hostname, self.model_label = sampler, hostname, model_label

    def collect(self) -> Iterator[Metric]:
        """The newest reading of every GPU read and not lost, then the sampler's tick and error counters."""
        s = self.sampler
        s.watch()  # a scrape is someone looking: keep the newest utilisation fresh
        by_key = {d.key: d for d in s.devices}
        rows = [(by_key[row["gpu"]], row) for row in s.latest()
                if row.get("state") != "lost" and row["gpu"] in by_key
                and row.get("time_s", 0.0) == row.get("time_s", 0.0)]  # NaN: never read
        status = s.status()
        yield from families(rows, self.hostname, self.model_label, simulated=status.simulated)
        for name, what, value in (("ticks", "Sampler ticks since it started.", status.ticks),
                                  ("errors", "Sampler reads that failed since it started.", status.errors)):
            counter = CounterMetricFamily(f"nbgpu_sampler_{name}", what)
            counter.add_metric([], float(value))
            yield counter


def registry_for(sampler: Sampler, hostname: str | None = None,
                 model_label: str = "model_name") -> CollectorRegistry:
    """A registry holding only ``sampler``'s collector (no process or platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpuCollector(sampler, hostname, model_label))
    return registry


def prometheus_text(sampler: Sampler, hostname: str | None = None,
                    model_label: str = "model_name") -> str:
    """The sampler's newest reading of every live GPU as Prometheus exposition text."""
    return generate_latest(registry_for(sampler, hostname, model_label)).decode()
