"""What the panel's texts say about themselves: the host row's own labels, a header whose parts
stay apart, a labelled clock that fits its line, the span the lines show, and thin marks."""

from __future__ import annotations

import re

import numpy as np
import pytest

import nbgpu
from nbgpu.sources.simulated import SimulatedGPUs
from nbgpu.widgets import monitor, registry
from nbgpu.widgets.panel_draw import SPARK_PX, rules


@pytest.fixture
def panel(clock):
    """A panel of 2 simulated GPUs and the host, 4 minutes into a 1 h window, marked every 2 s."""
    s = nbgpu.Sampler(source=SimulatedGPUs(count=2, clock=clock), interval=0.5, clock=clock)
    end = clock.t + 240
    n = 0
    while clock.t < end:
        clock.t += 0.5
        s.step(clock.t)
        n += 1
        if n % 4 == 0:
            s.mark(f"step {n}", t=clock.t)
    mon = monitor.GPUMonitor(sampler=s, window_s=3600, start=False)
    mon.refresh(force=True)
    yield mon
    registry.close_all()
    s.stop()


def _plain(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html)).strip()


def _grid_html(mon) -> str:
    return mon.children[1].children[1].value  # the HTML layer over the sparklines


def test_the_host_row_names_its_own_values(panel) -> None:
    html = _grid_html(panel)
    for label in ("host CPU", "RAM", "kernel CPU", "kernel RSS"):
        assert re.search(rf">{label}<", html), label


def test_the_header_keeps_the_interval_and_the_simulated_badge_apart(panel) -> None:
    header = panel.children[0].children[2].value
    # as the page's text reads it (tags add no space): "every 0.5 sSIMULATED" ran together
    text = re.sub(r"<[^>]+>", "", header)
    assert re.search(r"every\s0\.5\ss( · | )SIMULATED", text), text  # (\s: no-break spaces too)


def test_the_gpu_subtitle_labels_its_clock_and_fits_its_line(panel) -> None:
    details = re.findall(r'class="nbgpu-m nbgpu-n nbgpu-d"[^>]*>([^<]*)<', _grid_html(panel))
    gpu = [d for d in details if "MHz" in d]
    assert len(gpu) == 2, details
    for d in gpu:
        assert re.fullmatch(r"SM \d+ MHz", d.strip()), d  # PCIe goes to its tooltip


def test_the_span_the_lines_show_is_written_out(panel) -> None:
    assert panel.drawn_span_s is not None and panel.drawn_span_s < 3600
    minutes = panel.drawn_span_s / 60
    said = re.search(r"last ([\d.]+) min of 1 h", _plain(_grid_html(panel)))
    assert said, _plain(_grid_html(panel))
    assert abs(float(said.group(1)) - minutes) <= 0.5


def test_marks_closer_than_a_few_pixels_draw_one_thin_rule(panel) -> None:
    now = 1000.0
    marks = [(now - i * 2.0, f"m{i}") for i in range(1800)]  # every 2 s over 1 h
    x, _y, labels = rules(marks, 3.0, now, 3600.0)
    px = np.sort((x[:, 0] + 3600.0) / 3600.0 * SPARK_PX)
    assert len(x) <= SPARK_PX / 3 + 1 and np.all(np.diff(px) >= 3.0 - 1e-3)
    assert len(labels) == len(x)
    mark = panel.children[1].children[0].marks[2]  # the marks' rules
    assert mark.get_state()["stroke_width"] <= 0.75 and mark.get_state()["line_style"] == "solid"
