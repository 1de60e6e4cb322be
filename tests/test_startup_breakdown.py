"""The start-up benchmark's breakdown: kernel stamps and client events on one timeline."""

from __future__ import annotations

import pytest

from benchmarks.cpu_startup import _bound_note, breakdown
from benchmarks.kernel_probe import parse_importtime, timeline

IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       100 |        100 |     numpy.core
import time:      2000 |       2100 |   numpy
import time:       300 |       2400 | nbgpu.magics.extension
import time:      5000 |       5000 |   pandas.core
import time:      1000 |       6000 | bqplot
not an import line
"""


def test_timeline_merges_kernel_stamps_and_client_events_in_time_order() -> None:
    seen = {"sent": 100.0, "displayed": 100.5, "first_update": 100.6, "first_comm_open": 100.4,
            "last_comm_open": 100.45}
    kernel = {"stamps": [["load_ext", 100.1], ["panel_modules", 100.3], ["sampler_started", 100.2]],
              "first_tick": 100.25}
    rows = timeline(seen, kernel)
    assert [r[0] for r in rows] == [
        "kernel: load_ext", "kernel: sampler_started", "kernel: sampler's first tick began",
        "kernel: panel_modules", "client: first comm_open",
        "client: last comm_open before the update", "client: panel displayed",
        "client: first panel update"]
    assert rows[0][1:] == [pytest.approx(0.1), pytest.approx(0.1)]
    assert rows[-1][1:] == [pytest.approx(0.6), pytest.approx(0.1)]
    assert sum(r[2] for r in rows) == pytest.approx(rows[-1][1])


def test_timeline_without_the_kernel_report_keeps_what_the_client_saw() -> None:
    rows = timeline({"sent": 5.0, "displayed": 5.2, "first_update": None}, None)
    assert rows == [["client: panel displayed", pytest.approx(0.2), pytest.approx(0.2)]]


def test_breakdown_takes_medians_of_phases_every_run_reached() -> None:
    runs = [{"timeline": [["a", 0.1, 0.1], ["b", 0.4, 0.3], ["only once", 0.5, 0.1]]},
            {"timeline": [["a", 0.2, 0.2], ["b", 0.5, 0.3]]},
            {"timeline": [["a", 0.3, 0.3], ["b", 0.9, 0.6]]}]
    assert breakdown(runs) == [["a", pytest.approx(0.2), pytest.approx(0.2)],
                               ["b", pytest.approx(0.5), pytest.approx(0.3)]]


def test_importtime_gives_top_level_imports_and_own_time_per_package() -> None:
    out = parse_importtime(IMPORTTIME)
    assert out["top_level_ms"] == [["bqplot", 6.0], ["nbgpu.magics.extension", 2.4]]
    assert out["own_ms_by_package"][:2] == [["pandas", 5.0], ["numpy", 2.1]]
    assert out["total_own_ms"] == pytest.approx(8.4)


def test_the_note_names_the_longest_steps_and_heaviest_imports() -> None:
    rows = [["kernel: panel_modules", 0.4, 0.3], ["kernel: load_ext", 0.1, 0.1],
            ["client: first panel update", 0.45, 0.05]]
    note = _bound_note(rows, parse_importtime(IMPORTTIME))
    assert note.startswith("longest steps: kernel: panel_modules 300 ms; kernel: load_ext 100 ms")
    assert "pandas 5" in note
