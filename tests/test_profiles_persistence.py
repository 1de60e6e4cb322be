"""A saved notebook keeps its profiles: execute with nbclient, convert with nbconvert, read the HTML."""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter
from traitlets.config import Config

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def executed(tmp_path_factory) -> dict[str, nbformat.NotebookNode]:
    """The same notebook executed twice: without widget state (as JupyterLab saves by
    default) and with it (nbclient's default)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext nbgpu\nimport time, nbgpu"),
        nbformat.v4.new_code_cell("%%gpumon --source sim --interval 0.1\n"
                                  "time.sleep(0.6)\nnbgpu.mark('halfway')\ntime.sleep(0.6)"),
        nbformat.v4.new_code_cell("%gpumon --cells --cells-min 0.3"),
        nbformat.v4.new_code_cell("time.sleep(0.5)"),
        nbformat.v4.new_code_cell("%gpumon --cells off"),
    ]
    out = {}
    for name, store in (("no_state", False), ("state", True)):
        copy = nbformat.from_dict(nb)
        NotebookClient(copy, timeout=120, kernel_name="python3", store_widget_state=store).execute()
        path = tmp_path_factory.mktemp(name) / "profiled.ipynb"
        nbformat.write(copy, str(path))
        out[name] = nbformat.read(str(path), as_version=4)  # what was saved, read back
    return out


def to_html(nb, clear_metadata: bool = False) -> str:
    c = Config()
    if clear_metadata:
        c.ClearMetadataPreprocessor.enabled = True
    body, _ = HTMLExporter(config=c).from_notebook_node(nb)
    return body


def test_saved_notebook_without_widget_state_shows_picture_and_table(executed):
    html = to_html(executed["no_state"])
    pictures = re.findall(r"<svg[^>]*>.*?</svg>", html, re.S)
    assert len(pictures) == 2  # the %%gpumon report and the --cells line's details
    assert "<title>nbgpu timeline</title>" in pictures[0] and "halfway" in pictures[0]
    assert "GPU 0" in pictures[0] and "GPU 1" in pictures[0]
    assert html.count('<table class="nbgpu-summary"') == 2
    assert "(counter)" in html  # energy from the (simulated) energy counter
    shown = [float(d) for d in re.findall(r"GPU0 (\d+\.\d+)s", html)]
    assert "<details" in html and any(0.5 <= d < 1.0 for d in shown), shown  # the 0.5 s cell's line
    assert "widget-view+json" not in html


def test_widget_state_makes_nbconvert_draw_the_widget_unless_metadata_is_cleared(executed):
    nb = executed["state"]
    assert "widgets" in nb.metadata
    html = to_html(nb)
    assert "application/vnd.jupyter.widget-view+json" in html  # drawn by JavaScript instead
    cleared = to_html(nb, clear_metadata=True)
    assert "widget-view+json" not in cleared
    assert "<title>nbgpu timeline</title>" in cleared and '<table class="nbgpu-summary"' in cleared
