"""The In [] numbers of profiled cells are the ones the front end shows (issue 33)."""

from __future__ import annotations

import pytest

from conftest_profiles import kernel_fixture, loaded_fixture  # noqa: F401 - fixtures

pytestmark = pytest.mark.kernel


def _counts(kernel) -> list:
    return kernel.value("nbgpu.history()['execution_count'].tolist()")


def test_gpumon_cells_are_recorded_under_their_execution_count(loaded):
    loaded.run("nbgpu.profiles.history.clear()")
    first, _ = loaded.run("%%gpumon\ntime.sleep(0.2)")
    again, outputs = loaded.run("%%gpumon\ntime.sleep(0.2)")
    assert first["status"] == again["status"] == "ok", outputs
    assert _counts(loaded) == [first["execution_count"], again["execution_count"]]
    notes = [o["data"]["text/plain"] for o in outputs
             if o["msg_type"] == "display_data" and "vs its last run" in o["data"].get("text/plain", "")]
    assert notes and f"(In [{first['execution_count']}], " in notes[0], notes


def test_cells_mode_records_the_execution_count_of_each_cell(loaded):
    loaded.run("nbgpu.profiles.history.clear()")
    loaded.run("%gpumon --cells --cells-min 0")
    a, _ = loaded.run("time.sleep(0.1)")
    b, outputs = loaded.run("time.sleep(0.1)")
    loaded.run("%gpumon --cells off")
    assert _counts(loaded) == [a["execution_count"], b["execution_count"]]
    lines = [o["data"]["text/plain"] for o in outputs if o["msg_type"] == "display_data"]
    assert any(f"(In [{a['execution_count']}], " in line for line in lines), lines
