"""notebooks/diagnostics.ipynb runs in a real kernel and shows every scenario's diagnosis."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "diagnostics.ipynb"


@pytest.mark.kernel
def test_diagnostics_notebook_runs_and_each_scenario_raises_its_rule():
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    last = nb.cells[-1].outputs[0]["data"]["text/plain"]
    for scenario, rule in [("steady", "(none)"), ("input_bound", "input_bound"),
                           ("leak", "memory_leak"), ("oom", "oom_risk"), ("imbalance", "imbalance"),
                           ("throttle", "throttling"), ("thin", "busy_thin"), ("idle", "idle")]:
        assert f"'scenario': '{scenario}', 'rules': '{rule}'" in last, last
    heard = next(c for c in nb.cells if c.cell_type == "code" and c.source == "heard").outputs[0]
    assert "critical: GPU" in heard["data"]["text/plain"]
