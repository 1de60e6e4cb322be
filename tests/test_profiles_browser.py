"""The cell report and the --cells line in JupyterLab, driven through headless Chromium."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on 127.0.0.1 serving a notebook with a %%gpumon and a --cells cell."""
    root = tmp_path_factory.mktemp("lab")
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext nbgpu\nimport time, nbgpu"),
        nbformat.v4.new_code_cell("%%gpumon --source sim --interval 0.1\n"
                                  "nbgpu.mark('epoch 0')\ntime.sleep(0.8)\nnbgpu.mark('halfway')\n"
                                  "time.sleep(0.8)"),
        nbformat.v4.new_code_cell("%gpumon --cells --cells-min 0.3"),
        nbformat.v4.new_code_cell("time.sleep(0.5)"),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, str(root / "report.ipynb"))
    port, token = _free_port(), "nbgpu-test"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(root / ".config"), JUPYTER_RUNTIME_DIR=str(root / ".rt"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={root}", f"--LabApp.workspaces_dir={root / '.ws'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("JupyterLab did not start") from None
                time.sleep(0.5)
        yield f"{base}/lab/tree/report.ipynb?token={token}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


BOX_JS = "e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; }"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "screenshots"


def _boxes(loc) -> list[list[float]]:
    return [loc.nth(i).evaluate(BOX_JS) for i in range(loc.count())]


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def check_report_layout(page, report, shot: str) -> None:
    """The issue's chart and table: no legend over the data, mark labels off the lines and off
    each other, a memory axis from 0 whose labels differ, no wrapping cells, a total row."""
    drawn_legend = report.locator(".bqplot .legend")
    assert drawn_legend.count() == 0 or not drawn_legend.first.is_visible()
    legend = report.locator(".nbgpu-legend")
    assert "GPU 0" in legend.inner_text() and "GPU 1" in legend.inner_text()
    labels = _boxes(report.locator(".bqplot .label"))
    for i, a in enumerate(labels):
        assert not any(_overlap(a, b) for b in labels[i + 1:]), labels
    for metric in ("util (%)", "memory (GiB)"):
        report.locator("select").select_option(label=metric)
        time.sleep(1.0)
        data_lines = [b for i, b in enumerate(_boxes(report.locator(".bqplot .line")))
                      if report.locator(".bqplot .line").nth(i).evaluate(
                          "e => getComputedStyle(e).stroke") != "rgb(85, 85, 85)" and b[3] > b[1]]
        assert data_lines, metric
        highest = min(b[1] for b in data_lines)
        assert all(lb[3] <= highest + 1 for lb in _boxes(report.locator(".bqplot .label"))), (metric, highest)
    axes = report.locator(".bqplot .axis")
    y_axis = next(axes.nth(i) for i in range(axes.count()) if "memory" in axes.nth(i).text_content())
    y_ticks = [t.strip() for t in y_axis.locator(".tick text").all_text_contents() if t.strip()]
    assert "0" in y_ticks and len(set(y_ticks)) == len(y_ticks), y_ticks
    cells = _boxes(report.locator("table.nbgpu-summary td"))
    heights = [c[3] - c[1] for c in cells]
    assert max(heights) - min(heights) <= 1, heights  # one line each: nothing wrapped
    assert "all GPUs" in report.locator("table.nbgpu-summary").inner_text()
    report.screenshot(path=shot)


def test_report_draws_lines_marks_and_table_and_the_cells_line_opens(lab, tmp_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1400})
            page.goto(lab)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
            page.wait_for_function("document.body.innerText.includes('| Idle')", timeout=90_000)
            first_prompt = page.locator(".jp-Cell >> nth=0").locator(".jp-InputPrompt")
            for _ in range(3):  # a request sent while the kernel still connects can be lost
                page.click(".jp-Cell >> nth=0")
                page.keyboard.press("Shift+Enter")
                try:
                    page.wait_for_function(
                        "el => /\\[\\d+\\]/.test(el.innerText)", arg=first_prompt.element_handle(),
                        timeout=15_000)
                    break
                except Exception:
                    continue
            for _ in range(3):
                page.keyboard.press("Shift+Enter")
                time.sleep(0.3)
            page.wait_for_selector(".bqplot .line", timeout=60_000)
            page.wait_for_selector("details.nbgpu-cell", timeout=60_000)
            report = page.locator(".jp-Cell >> nth=1")
            assert report.locator(".bqplot .line").count() >= 3  # 2 GPUs + the mark rules
            labels = [report.locator(".bqplot .label").nth(i).text_content()
                      for i in range(report.locator(".bqplot .label").count())]
            assert "halfway" in labels and "epoch 0" in labels
            assert report.locator("table.nbgpu-summary tr").count() == 4  # header, 2 GPUs, all GPUs
            update_docs = os.environ.get("NBGPU_UPDATE_SCREENSHOTS") == "1"
            shot = str(DOCS / "cell-report-jupyterlab.png" if update_docs else tmp_path / "r.png")
            check_report_layout(page, report, shot)
            line = page.locator("details.nbgpu-cell")
            said = re.search(r"GPU0 (\d+\.\d+)s", line.locator("summary").inner_text())
            # the cell slept 0.5 s; a loaded machine runs its hooks later, never sooner
            assert said and 0.5 <= float(said.group(1)) < 3.0, line.locator("summary").inner_text()
            assert not line.locator("table").is_visible()
            line.locator("summary").click()
            assert line.locator("table.nbgpu-summary").is_visible()
            page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        finally:
            browser.close()
