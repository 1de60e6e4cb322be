"""The panel's layout in JupyterLab, by the boxes Chromium lays out (not by pixels): the host
row's labels sit in their value cells, the header's interval and SIMULATED badge stay
apart, the GPU subtitle fits its line, the span the lines cover is written out, and mark
rules are thin."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest_panel import chromium_page, jupyter_server, run_all_cells, write_notebook

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

CELLS = ["%load_ext nbgpu",
         "%gpumon --source sim --window 3600 --refresh 0.5",
         "import time, nbgpu\nfor i in range(40):\n    nbgpu.mark(f'step {i}')\n    time.sleep(0.25)"]
BOXES = """() => {
  const box = (e) => { const r = e.getBoundingClientRect();
    return {left: r.left, right: r.right, top: r.top, bottom: r.bottom}; };
  const panel = document.querySelector('.nbgpu-panel');
  const head = panel.querySelector('.nbgpu-p span.nbgpu-m');
  const badge = Array.from(panel.querySelectorAll('.nbgpu-b')).find(b => b.textContent === 'SIMULATED');
  return {
    describe: head ? box(head) : null, badge: badge ? box(badge) : null,
    host: Array.from(panel.querySelectorAll('.nbgpu-v .nbgpu-h')).map(h => ({
      text: h.textContent, label: box(h), cell: box(h.parentElement)})),
    details: Array.from(panel.querySelectorAll('.nbgpu-d')).map(d => ({
      text: d.textContent, scroll: d.scrollWidth, client: d.clientWidth})),
    span: Array.from(panel.querySelectorAll('.nbgpu-span')).map(s => ({text: s.textContent, box: box(s),
      scroll: s.scrollWidth, client: s.clientWidth})),
    firstTitle: box(panel.querySelector('.nbgpu-c .nbgpu-t')),
    rules: Array.from(panel.querySelectorAll('.nbgpu-spark path.line')).map(
      p => parseFloat(getComputedStyle(p).strokeWidth)),
  };
}"""


def test_panel_layout_in_jupyterlab(tmp_path: Path) -> None:
    write_notebook(tmp_path / "panel.ipynb", CELLS)
    with jupyter_server("jupyterlab", tmp_path) as server, \
            chromium_page(tmp_path / ".chromium", width=1440) as page:
        page.goto(server.url("jupyterlab", "panel.ipynb"))
        run_all_cells(page)
        page.wait_for_selector(".nbgpu-v .nbgpu-h", state="attached", timeout=90_000)
        page.wait_for_function("() => /MHz/.test(Array.from(document.querySelectorAll('.nbgpu-d'))"
                               ".map(d => d.textContent).join(' '))", timeout=30_000)
        page.wait_for_timeout(4000)  # some marks
        got = page.evaluate(BOXES)
        page.locator(".nbgpu-panel").screenshot(path=str(tmp_path / "panel-layout.png"))

    assert [h["text"] for h in got["host"]] == ["host CPU", "RAM", "kernel CPU", "kernel RSS"], got["host"]
    for h in got["host"]:  # each label inside its value cell, the value below it
        lab, cell = h["label"], h["cell"]
        assert cell["left"] - 0.5 <= lab["left"] and lab["right"] <= cell["right"] + 0.5, h
        assert cell["top"] - 0.5 <= lab["top"] and lab["bottom"] <= cell["bottom"] + 0.5, h
    assert got["badge"]["left"] >= got["describe"]["right"] + 2, (got["describe"], got["badge"])
    gpu = [d for d in got["details"] if "MHz" in d["text"]]
    assert gpu and all(d["text"].startswith("SM ") for d in gpu), got["details"]
    for d in got["details"]:
        assert d["scroll"] <= d["client"], f"cut off: {d}"
    (span,) = got["span"]
    assert span["text"].startswith("last ") and span["text"].endswith(" of 1 h"), span
    assert span["scroll"] <= span["client"] and span["box"]["right"] <= got["firstTitle"]["left"], span
    assert got["rules"] and min(got["rules"]) <= 0.75, got["rules"]  # the thin rules are there
