"""Without a GPU, a block's report is one line saying so and how to simulate GPUs (issue 33, 15)."""

from __future__ import annotations

import time

import pytest

from nbgpu import Sampler, capture
from nbgpu.profiles.render import NO_GPU_LINE, static_html
from nbgpu.sources.base import HostOnlySource
from nbgpu.widgets.cell_report import CellReport


@pytest.fixture
def cap():
    s = Sampler(HostOnlySource("NVML is not available (test)"), 0.05)
    s.start()
    try:
        with capture(sampler=s) as c:
            time.sleep(0.1)
        yield c
    finally:
        s.stop()


def test_the_line_names_the_real_ways_to_simulate():
    assert "--source sim" in NO_GPU_LINE and 'nbgpu.capture(source="sim")' in NO_GPU_LINE


def test_display_has_no_empty_chart(cap):
    bundle = CellReport(cap)._repr_mimebundle_()
    assert "image/svg+xml" not in bundle
    assert "application/vnd.jupyter.widget-view+json" not in bundle
    assert "No GPU is visible" in bundle["text/plain"]
    html = static_html(cap)
    assert "<svg" not in html and "No GPU is visible" in html


def test_summary_warns_with_the_same_line(cap):
    with pytest.warns(UserWarning, match="No GPU is visible"):
        df = cap.summary
    assert df.empty


def test_cell_mode_line_has_no_chart(cap):
    from nbgpu.profiles.render import compact_html

    html = compact_html(cap)
    assert "<svg" not in html and "--source sim" in html
