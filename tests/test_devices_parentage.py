"""Which card a MIG slice belongs to comes from ``Device.parent``, never from its key's text.

Prometheus keys whole cards "node-a/0" (a "/" in the key, no parent) and MIG slices
"node-b/0/1" (parent "node-b/0"); NVML keys cards 0, 1 and slices "0/1" (parent 0).
"""

from __future__ import annotations

import numpy as np
import pytest

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.errors import BadArgumentError
from nbgpu.profiles.capture import Capture
from nbgpu.profiles.render import one_line, static_svg
from nbgpu.profiles.summary import summarize
from nbgpu.sources.base import Batch, Device, Reading

T0 = 1_800_000_000.0
MEM = {"node-a/0": 10 * 2**30, "node-a/1": 20 * 2**30, "node-b/0": 30 * 2**30,
       "node-b/0/1": 5 * 2**30}
POWER = {"node-a/0": 100.0, "node-a/1": 200.0, "node-b/0": 300.0, "node-b/0/1": 50.0}


class NodesSource:
    """Two Prometheus-style nodes: cards "node-a/0", "node-a/1", "node-b/0" and slice "node-b/0/1"."""

    kind = "prometheus"
    simulated = True

    def __init__(self) -> None:
        cards = [Device(k, "card", f"GPU-{k}", node=k.split("/")[0], simulated=True,
                        metrics=("mem_used_bytes", "power_w"))
                 for k in ("node-a/0", "node-a/1", "node-b/0")]
        mig = Device("node-b/0/1", "card MIG 1g", "MIG-b01", parent="node-b/0", mig=True,
                     node="node-b", simulated=True, metrics=("mem_used_bytes", "power_w"))
        self._devices = [*cards, mig]

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def devices(self) -> list[Device]:
        return list(self._devices)

    def streams(self) -> dict:
        cols = {"mem_used_bytes": np.dtype("float64"), "power_w": np.dtype("float64")}
        return {d.key: {"tick": dict(cols)} for d in self._devices}

    def read(self, now: float, due: frozenset[str]) -> Reading:
        reading = Reading()
        if "tick" in due:
            for d in self._devices:
                reading.batches.append(Batch(d.key, "tick", np.array([now]), {
                    "mem_used_bytes": np.array([float(MEM[d.key])]),
                    "power_w": np.array([POWER[d.key]])}))
        return reading

    def describe(self) -> str:
        return "4 GPU(s) on 2 host(s)"


def stepped(sampler: Sampler, seconds: float) -> Sampler:
    """The sampler stepped once per interval over ``seconds`` from T0 on its fake clock."""
    for k in range(int(seconds / sampler.interval) + 1):
        sampler.step(T0 + k * sampler.interval)
    return sampler


def nodes_sampler(gpus=None) -> Sampler:
    return Sampler(NodesSource(), interval=0.5, gpus=gpus, host=False, diagnostics=False,
                   clock=lambda: T0)


def test_selecting_a_prometheus_card_keeps_it_and_its_slices_only():
    s = nodes_sampler(gpus=["node-b/0"])
    assert [d.key for d in s.devices] == ["node-b/0", "node-b/0/1"]
    s = nodes_sampler(gpus=["node-a/0"])
    assert [d.key for d in s.devices] == ["node-a/0"]  # "node-a/0" is a card, not a slice
    assert [d.key for d in nodes_sampler().devices] == list(MEM)


def test_a_slice_is_not_a_card_to_select():
    with pytest.raises(BadArgumentError, match="out of range"):
        nodes_sampler(gpus=["node-b/0/1"])


def test_summary_counts_prometheus_cards_and_leaves_out_their_slices():
    s = stepped(nodes_sampler(), 4.0)
    summary = summarize(s.timeline, T0, T0 + 4.0)
    assert [r["gpu"] for r in summary.rows] == list(MEM)
    assert [r["parent"] for r in summary.rows] == [None, None, None, "node-b/0"]
    cards = ("node-a/0", "node-a/1", "node-b/0")
    assert summary.combined["gpus"] == len(cards)
    assert summary.combined["mem_peak_bytes"] == sum(MEM[k] for k in cards)
    assert summary.combined["power_mean_w"] == pytest.approx(sum(POWER[k] for k in cards))
    only_b = summarize(s.timeline, T0, T0 + 4.0, gpus=["node-b/0"])
    assert [r["gpu"] for r in only_b.rows] == ["node-b/0", "node-b/0/1"]
    assert only_b.combined["gpus"] == 1
    assert only_b.combined["mem_peak_bytes"] == MEM["node-b/0"]


def test_summary_of_a_frame_takes_parents_from_its_devices():
    s = stepped(nodes_sampler(), 4.0)
    frame = s.timeline.to_pandas()
    summary = summarize(frame, devices=s.devices)
    assert summary.combined["gpus"] == 3
    assert [r["name"] for r in summary.rows] == ["card", "card", "card", "card MIG 1g"]


def test_one_line_names_prometheus_cards_and_leaves_out_slices():
    s = stepped(Sampler(NodesSource(), interval=0.5, gpus=["node-a/0", "node-b/0"], host=False,
                        diagnostics=False, clock=lambda: T0), 4.0)
    line = one_line(summarize(s.timeline, T0, T0 + 4.0))
    assert line.startswith("GPUnode-a/0 ") and " | GPUnode-b/0 " in line
    assert "node-b/0/1" not in line and "GPUs" not in line


def test_the_report_of_a_capture_keeps_the_selected_cards_slices():
    s = stepped(nodes_sampler(), 4.0)
    cap = Capture(s, gpus=["node-b/0"])
    cap.start_time, cap.end_time = T0, T0 + 4.0
    assert list(cap.summary["gpu"]) == ["node-b/0", "node-b/0/1"]
    assert [d.key for d in cap.timeline.devices] == ["node-b/0", "node-b/0/1"]
    svg = static_svg(cap)
    assert "node-b/0" in svg and "node-a/" not in svg


def test_nvml_mig_slices_follow_their_card():
    s = Sampler(SimulatedGPUs(count=2, mig={0: 2}, seed=1), interval=0.5, gpus=[0], host=False,
                diagnostics=False, clock=lambda: T0)
    keys = [d.key for d in s.devices]
    assert keys[0] == 0 and len(keys) == 3
    assert all(d.parent == 0 and d.card == 0 and d.mig for d in s.devices[1:])
    stepped(s, 4.0)
    summary = summarize(s.timeline, T0, T0 + 4.0)
    assert [r["gpu"] for r in summary.rows] == keys
    assert summary.combined["gpus"] == 1
    assert summary.combined["mem_peak_bytes"] == summary.rows[0]["mem_peak_bytes"]
    assert one_line(summary).startswith("GPU0 ") and "GPUs" not in one_line(summary)
    with pytest.raises(BadArgumentError, match="out of range"):
        Sampler(SimulatedGPUs(count=2, mig={0: 2}), gpus=[keys[1]], host=False, diagnostics=False)
