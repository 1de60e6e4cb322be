"""notebooks/quickstart.ipynb runs top to bottom (here: simulated GPUs, CPU training)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.kernel

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "quickstart.ipynb"


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def test_quickstart_runs_top_to_bottom(tmp_path: Path) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                   ).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.source
    everything = "\n".join(_text(c) for c in code)
    assert everything.startswith("nbgpu ")
    panel = next(c for c in code if "GPUMonitor(" in c.source)
    widget = [o for o in panel.outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widget, "the panel cell should display a widget"
    assert "epoch 2" in everything
    assert "util_pct" in everything and "gpu" in everything
    assert "panels: 0 updating, 1 stopped" in everything
    if "No GPU visible here" in everything:
        assert "simulated" in everything
