"""nbgpu.svg.svg_timeline: a valid standalone SVG with lines, gaps, marks and legends."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pandas as pd
import pytest

from conftest_profiles import clean_profiles_fixture  # noqa: F401 - fixture
from nbgpu.svg import svg_timeline

NS = {"s": "http://www.w3.org/2000/svg"}
T0 = 1_800_000_000.0


def frame(n: int = 200, gpus=(0, 1), gap: tuple[int, int] | None = None) -> pd.DataFrame:
    parts = []
    for g in gpus:
        t = T0 + np.arange(n) * 0.1
        util = np.linspace(0, 100, n)
        if gap:
            util[gap[0]:gap[1]] = np.nan
        parts.append(pd.DataFrame({"time": pd.to_datetime(t, unit="s", utc=True), "gpu": g,
                                   "util_pct": util, "mem_used_bytes": 1e9 * (1 + g) + 1e7 * np.arange(n),
                                   "power_w": 300.0 + g}))
    return pd.concat(parts, ignore_index=True)


def test_one_chart_per_metric_one_line_per_gpu():
    svg = svg_timeline(frame())
    root = ET.fromstring(svg)
    assert root.tag == "{http://www.w3.org/2000/svg}svg" and root.get("width") == "720"
    paths = root.findall(".//s:path", NS)
    assert len(paths) == 3 * 2  # util, memory, power x 2 GPUs
    text = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "util (%)" in text and "memory (GiB)" in text and "power (W)" in text
    assert "GPU 0" in text and "GPU 1" in text


def test_metrics_argument_and_missing_columns():
    svg = svg_timeline(frame(), metrics=["power_w", "temp_c"], width=400)
    root = ET.fromstring(svg)
    assert len(root.findall(".//s:path", NS)) == 2  # temp_c is absent: skipped, not an error
    assert root.get("width") == "400"


def test_nan_is_a_gap_not_a_zero():
    svg = svg_timeline(frame(gpus=(0,), gap=(50, 120)), metrics=["util_pct"])
    d = ET.fromstring(svg).find(".//s:path", NS).get("d")
    assert d.count("M") == 2  # the line restarts after the gap


def test_marks_are_labelled_and_escaped():
    marks = [(T0 + 5.0, "epoch <1> & more")]
    svg = svg_timeline(frame(), marks=marks)
    root = ET.fromstring(svg)  # parses, so the label was escaped
    dashed = [ln for ln in root.iter("{http://www.w3.org/2000/svg}line") if ln.get("stroke-dasharray")]
    assert len(dashed) == 3  # one rule per chart
    assert "epoch <1> & more" in [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_long_series_are_decimated_but_keep_peaks():
    n = 100_000
    df = frame(n=n, gpus=(0,))
    df.loc[n // 2, "util_pct"] = 1000.0  # one spike
    svg = svg_timeline(df, metrics=["util_pct"])
    d = ET.fromstring(svg).find(".//s:path", NS).get("d")
    assert d.count("L") < 2000
    ys = [float(p.split(",")[1]) for p in d.replace("M", "L").split("L") if p]
    assert min(ys) < 40  # the spike reaches near the top of the chart


def test_empty_frame_says_so():
    svg = svg_timeline(frame().iloc[:0])
    assert "no GPU samples" in svg
    ET.fromstring(svg)


def test_percent_charts_are_fixed_0_to_100_and_time_is_elapsed_seconds():
    df = frame()
    df["util_pct"] = 90.0 + 6.0 * (np.arange(len(df)) % 2)  # a line between 90 and 96 %
    root = ET.fromstring(svg_timeline(df, metrics=["util_pct"]))
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "0" in labels and "100" in labels  # the scale, not the data range
    assert "10s" in labels or "20s" in labels  # elapsed seconds, not wall-clock times
    assert not any(":" in (lb or "") for lb in labels)


def test_cell_report_widget_axes(clean_profiles):
    """The bqplot report: elapsed seconds on x from 0, util on a fixed 0–100 scale (with a band above
    for the mark labels), memory in GiB from 0, the legend outside the chart."""
    import time

    import nbgpu
    from nbgpu import Sampler, SimulatedGPUs
    from nbgpu.widgets.cell_report import LINES_TOP, build_widget

    s = Sampler(SimulatedGPUs(count=1, seed=1), interval=0.1).start()
    try:
        with nbgpu.capture() as cap:
            time.sleep(0.4)
            nbgpu.mark("half")
            time.sleep(0.4)
        box = build_widget(cap)
    finally:
        s.stop()
    picker, legend, fig = box.children[1], box.children[2], box.children[3]
    assert "GPU 0" in legend.value and not any(m.display_legend for m in fig.marks)
    picker.value = "util_pct"
    x_scale = fig.axes[0].scale.get_state()
    y_scale = fig.axes[1].scale.get_state()
    assert x_scale["min"] == 0.0 and x_scale["max"] == pytest.approx(cap.duration_s)
    assert (y_scale["min"], y_scale["max"]) == (0.0, pytest.approx(100.0 / LINES_TOP))
    assert "seconds since the cell started" in fig.axes[0].get_state()["label"]
    line = fig.marks[0]
    assert float(np.min(line.x)) >= 0.0 and float(np.max(line.x)) <= cap.duration_s + 0.5
    label = next(m for m in fig.marks if type(m).__name__ == "Label")
    assert list(label.text) == ["half"]
    picker.value = "mem_used_bytes"
    assert fig.axes[1].get_state()["label"] == "memory (GiB)"
    assert fig.axes[1].scale.get_state()["min"] == 0.0  # never a ± 50 MiB zoom that makes noise swing
