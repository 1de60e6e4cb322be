"""Cell mode and %%gpumon's runner on an in-process IPython shell (hooks, history, cost)."""

from __future__ import annotations

import gc
import re
import sys
import threading
import tracemalloc
from collections import deque

import pytest
from IPython.core.interactiveshell import ExecutionInfo, ExecutionResult, InteractiveShell

import nbgpu
from conftest_profiles import clean_profiles_fixture, sim_sampler_fixture  # noqa: F401 - fixtures
from nbgpu.profiles import cells, history
from nbgpu.profiles.history import records


@pytest.fixture
def shell(clean_profiles):
    sh = InteractiveShell.instance()
    yield sh
    cells.disable_cell_mode(sh)


def test_cell_mode_records_one_row_per_cell(shell, sim_sampler):
    cells.enable_cell_mode(shell, lambda: sim_sampler, min_duration_s=0.2)
    shell.run_cell("import time\nx = 1", store_history=True)
    shell.run_cell("time.sleep(0.3)", store_history=True)
    result = shell.run_cell("raise ValueError('bad input')", store_history=True)
    shell.run_cell("y = 2", store_history=True)
    cells.disable_cell_mode(shell)
    shell.run_cell("z = 3", store_history=True)  # not recorded any more
    assert isinstance(result.error_in_exec, ValueError)
    assert str(result.error_in_exec) == "bad input"
    h = nbgpu.history()
    assert list(h["first_line"]) == ["x = 1", "time.sleep(0.3)",
                                     "raise ValueError('bad input')", "y = 2"]
    assert list(h["status"]) == ["ok", "ok", "failed", "ok"]
    assert h["execution_count"].is_monotonic_increasing
    # The capture spans the hooks around the cell too: at least the cell's 0.3 s, more on a loaded machine.
    assert 0.29 <= h["duration_s"].iloc[1] < 1.5
    assert "ValueError: bad input" in h["error"].iloc[2]
    for col in ("mem_peak_bytes", "util_mean_pct", "energy_j", "temp_max_c", "alerts"):
        assert col in h.columns
    assert h["energy_j"].iloc[1] > 0
    per_gpu = nbgpu.history(per_gpu=True)
    assert len(per_gpu) == 8 and set(per_gpu["gpu"]) == {0, 1}


def test_short_cells_stay_quiet_long_ones_print_a_line(shell, sim_sampler, capsys):
    cells.enable_cell_mode(shell, lambda: sim_sampler, min_duration_s=0.3)
    shell.run_cell("a = 1", store_history=True)
    assert "GPU0" not in capsys.readouterr().out
    shell.run_cell("import time; time.sleep(0.4)", store_history=True)
    out = capsys.readouterr().out
    # The capture spans the hooks around the cell too, longer on a loaded machine: the line
    # says the recorded duration, which holds the 0.4 s sleep.
    shown = re.search(r"GPU0 (\d+\.\d+)s", out)
    recorded = nbgpu.history()["duration_s"].tolist()  # the quiet cell's, then this one's
    assert shown and len(recorded) == 2 and 0.4 <= recorded[-1] < 1.0, (out, recorded)
    assert float(shown[1]) == pytest.approx(recorded[-1], abs=0.006)
    assert "util" in out and "GPU1" in out


def test_interrupted_cell_is_marked(shell, sim_sampler):
    cells.enable_cell_mode(shell, lambda: sim_sampler, min_duration_s=10)
    shell.run_cell("raise KeyboardInterrupt", store_history=True)
    assert nbgpu.history()["status"].tolist() == ["interrupted"]


def test_a_failing_sampler_never_breaks_cells(shell, clean_profiles):
    def broken():
        raise nbgpu.NVMLUnavailableError("NVML is not available (test)")

    cells.enable_cell_mode(shell, broken, min_duration_s=0)
    result = shell.run_cell("q = 41 + 1", store_history=True)
    assert result.success and shell.user_ns["q"] == 42
    assert len(nbgpu.history()) == 0


def test_silent_executions_are_not_recorded(shell, sim_sampler):
    cells.enable_cell_mode(shell, lambda: sim_sampler, min_duration_s=10)
    shell.run_cell("w = 1", silent=True)
    shell.run_cell("w = 2", store_history=False)
    assert len(nbgpu.history()) == 0


def test_hooks_are_cheap_leave_no_threads_and_bounded_memory(shell, sim_sampler, monkeypatch):
    # Cheap by what they do, not by a clock (the cell_hook benchmark times them): a cell
    # shorter than --cells-min makes no NVML call and no summary on the cell's thread and
    # does not wait for the sampler's edge read.
    from nbgpu.profiles.capture import Capture
    from nbgpu.sources.nvml_gateway import NVMLGateway

    main = threading.get_ident()
    on_main: list[str] = []
    waits: list[bool] = []
    gateway_call, finish = NVMLGateway.call, Capture.finish

    def call(self, function, *args):
        if threading.get_ident() == main:
            on_main.append(function)
        return gateway_call(self, function, *args)

    def finishing(self, *args, **kwargs):
        waits.append(bool(kwargs.get("wait", True)))
        return finish(self, *args, **kwargs)

    def no_summary(self):
        raise AssertionError("a short cell was summarised by its hooks")

    monkeypatch.setattr(NVMLGateway, "call", call)
    monkeypatch.setattr(Capture, "finish", finishing)
    monkeypatch.setattr(Capture, "summarized", no_summary)
    cells.enable_cell_mode(shell, lambda: sim_sampler, min_duration_s=60)
    mode = cells._mode
    threads = threading.active_count()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for i in range(1000):
        info = ExecutionInfo(f"x = {i}", True, False, True, f"cell-{i}")
        result = ExecutionResult(info)
        result.execution_count = i + 1
        mode.pre_run_cell(info)
        mode.post_run_cell(result)
    gc.collect()
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(d.size_diff for d in after.compare_to(before, "filename")
                if "nbgpu/profiles" in str(d.traceback))
    assert on_main == [] and waits == [False] * 1000
    assert threading.active_count() == threads
    assert len(records()) == 1000
    assert grown < 2_000 * 1000, f"{grown} bytes for 1000 cells"
    assert records()[-1].cell_id == "cell-999"


def test_history_is_bounded(shell, sim_sampler, monkeypatch):
    monkeypatch.setattr(sys.modules["nbgpu.profiles.history"], "_records", deque(maxlen=5))
    cells.enable_cell_mode(shell, lambda: sim_sampler, min_duration_s=60)
    for i in range(12):
        shell.run_cell(f"v = {i}", store_history=True)
    assert nbgpu.history()["first_line"].tolist() == [f"v = {i}" for i in range(7, 12)]


def test_run_profiled_cell_reports_and_reraises(shell, sim_sampler, capsys):
    cap = cells.run_profiled_cell(shell, "import time\ntime.sleep(0.3)\n6 * 7", sim_sampler)
    out = capsys.readouterr().out
    assert "42" in out and "GPU profile" in out
    assert cap.status == "ok" and cap.duration_s == pytest.approx(0.3, abs=0.1)
    err = None
    try:
        cells.run_profiled_cell(shell, "raise ZeroDivisionError('nope')", sim_sampler)
    except ZeroDivisionError as exc:
        err = exc
    assert err is not None and str(err) == "nope"
    h = nbgpu.history()
    assert h["status"].tolist() == ["ok", "failed"]
    assert h["first_line"].tolist() == ["time.sleep(0.3)", "raise ZeroDivisionError('nope')"]


def test_profiled_cell_inside_cell_mode_is_recorded_once(shell, sim_sampler):
    cells.enable_cell_mode(shell, lambda: sim_sampler, min_duration_s=60)
    shell.user_ns["_s"] = sim_sampler
    shell.run_cell("from nbgpu.profiles.cells import run_profiled_cell as _r\n"
                   "_r(get_ipython(), 'import time; time.sleep(0.1)', _s)", store_history=True)
    assert len(nbgpu.history()) == 1


# -- a cell against its last run -------------------------------------------------------------------
def _sampler_with(util: float, power_w: float, mem: float, t0: float, n: int = 50, dt: float = 0.1):
    """A stopped sampler whose store holds steady readings of two GPUs from ``t0``."""
    s = nbgpu.Sampler(nbgpu.SimulatedGPUs(count=1, seed=0), interval=dt)
    for i in range(n):
        t = t0 + i * dt
        s.store.append_row(0, "tick", t, {"util_pct": util, "power_w": power_w, "mem_used_bytes": mem})
    return s


def _record(cell_id: str, source: str, t0: float, energy_scale: float) -> history.CellRecord:
    from nbgpu.profiles.capture import Capture

    cap = Capture(_sampler_with(80.0, 300.0 * energy_scale, 8 * 1024**3, t0))
    cap.start_time, cap.end_time, cap.status = t0 + 0.5, t0 + 4.5, "ok"
    rec = history.CellRecord(1, cell_id, source, cap)
    history.add(rec)
    return rec


def test_a_cell_run_again_says_how_it_compares(clean_profiles):
    _record("cell-x", "train()", 1000.0, 1.0)
    same = _record("cell-x", "train()  # edited", 2000.0, 1.0)
    assert cells.against_last(same).endswith(
        "energy the same, duration the same, peak memory the same, utilisation the same")
    more = _record("other-id", "train()", 3000.0, 1.12)  # same source text, another id
    line = cells.against_last(more)
    assert "ago): 12 % more energy, duration the same" in line, line
    assert cells.against_last(_record("new", "fresh()", 4000.0, 1.0)) == ""


def test_a_cell_with_repeats_judges_by_their_spread(clean_profiles):
    """Three earlier runs spread by ±5 % in energy (far more than each run's own noise): a 4 %
    change is inside that spread, 30 % is not."""
    for i, scale in enumerate((1.0, 1.06, 0.95)):
        _record("cell-r", "step()", 1000.0 + 100 * i, scale)
    inside = _record("cell-r", "step()", 2000.0, 0.99)  # 4 % above the last run (0.95)
    assert "energy the same" in cells.against_last(inside), cells.against_last(inside)
    outside = _record("cell-r", "step()", 3000.0, 1.29)
    assert "30 % more energy" in cells.against_last(outside), cells.against_last(outside)
    assert [r.start_time for r in history.earlier(outside)] == [1000.5, 1100.5, 1200.5, 2000.5]


# -- history() as a person reads it ---------------------------------------------------------------
def test_history_displays_a_readable_table_and_keeps_the_raw_frame(clean_profiles):
    import pandas as pd

    _record("cell-1", "import time\n# warm up\n%time\nstep(model, batch)", 1000.0, 1.0)
    _record("cell-2", "import numpy as np", 2000.0, 1.0)
    h = nbgpu.history()
    assert h["first_line"].tolist() == ["step(model, batch)", "import numpy as np"]  # imports skipped
    html = h._repr_html_()
    heads = re.findall(r"<th(?:\s[^>]*)?>(.*?)</th>", html)
    for head in ("In", "first line", "duration", "util mean", "peak memory", "energy", "power mean",
                 "status"):
        assert head in heads, heads
    assert "GiB" in html and "kJ" in html and " W" in html and "%" in html
    assert "8589934592" not in html and "GPU-" not in html  # no raw bytes, no UUIDs
    assert len(heads) <= 12
    text = repr(h)
    assert "step(model, batch)" in text and "GiB" in text and "…" not in text.splitlines()[0]
    raw = h.raw()
    assert type(raw) is pd.DataFrame and raw["mem_peak_bytes"].iloc[0] == 8 * 1024**3
    assert type(h[["cell_id", "energy_j"]]) is pd.DataFrame  # any selection is the raw frame
