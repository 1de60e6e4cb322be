"""Where the main thread was, in a real IPython kernel: a %%gpumon cell's report names the
cell line (as numbered in the cell, the %%gpumon line being 1) and its share of the time."""

from __future__ import annotations

import pytest

from conftest_profiles import kernel_fixture, loaded_fixture  # noqa: F401 - fixtures

pytestmark = pytest.mark.kernel

CELL = """%%gpumon
import time
def work(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.005)
work(0.3)
work(1.5)
"""


def test_a_profiled_cell_reports_where_its_main_thread_was(loaded):
    reply, outputs = loaded.run(CELL)
    assert reply["status"] == "ok", outputs
    texts = [o["data"].get("text/plain", "") for o in outputs if o["msg_type"] == "display_data"]
    report = next(t for t in texts if t.startswith("GPU profile"))
    assert "main thread: sleep, I/O, locks" in report, report
    assert "line 8 `work(1.5)`:" in report, report
    where = loaded.value("(lambda w: [w.attrs['top_line'], dict(zip(w['category'], w['share']))])"
                         "(nbgpu.profiles.history.records()[-1].capture.where())")
    top, shares = where
    assert top["line"] == 8 and top["text"] == "work(1.5)" and 0.7 < top["share"] < 0.95
    assert shares["idle"] > 0.8
    row = loaded.value("nbgpu.history().iloc[-1][['share_idle', 'top_line']].tolist()")
    assert row[0] > 0.8 and row[1].startswith("line 8 `work(1.5)`")


def test_a_profiled_cell_in_cell_mode_numbers_its_lines_as_the_cell_does(loaded):
    loaded.run("%gpumon --cells --cells-min 0")
    try:
        reply, outputs = loaded.run(CELL)
    finally:
        loaded.run("%gpumon --cells off")
    assert reply["status"] == "ok", outputs
    texts = [o["data"].get("text/plain", "") for o in outputs if o["msg_type"] == "display_data"]
    report = next(t for t in texts if t.startswith("GPU profile"))
    assert "line 8 `work(1.5)`:" in report, report
