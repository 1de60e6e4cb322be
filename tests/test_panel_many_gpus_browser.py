"""The panel with 8 GPUs and with MIG slices in JupyterLab, headless Chromium: rows readable
and aligned (label boxes one under another at the same x, values level with their label),
nothing cut (every row inside the panel box, no text clipped), per-slice values and
"n/a (MIG)" where MIG reports nothing."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path

import pytest

from conftest_panel import chromium_page, jupyter_server, run_all_cells, write_notebook

pytestmark = pytest.mark.browser

CELLS = [
    "import nbgpu\n"
    "eight = nbgpu.Sampler(nbgpu.SimulatedGPUs(8, seed=1), interval=0.1).start()\n"
    "nbgpu.GPUMonitor(sampler=eight, processes=False)",
    "mig = nbgpu.Sampler(nbgpu.SimulatedGPUs(2, mig={0: 2}, seed=1), interval=0.1).start()\n"
    "nbgpu.GPUMonitor(sampler=mig, processes=False)",
]

# Per panel: the panel box, the label rows (boxes and text), and per value column its rows.
GEOMETRY = """() => Array.from(document.querySelectorAll('.nbgpu-panel')).map(panel => {
    const box = e => { const r = e.getBoundingClientRect();
                       return {x: r.left, y: r.top, w: r.width, h: r.height}; };
    const cut = e => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1;
    const htmls = Array.from(panel.querySelectorAll('.nbgpu-p'));
    const labels = htmls.find(p => p.querySelector(':scope > .nbgpu-r b')
                                   && !p.querySelector('.nbgpu-v'));
    const rows = labels ? Array.from(labels.children).filter(e => e.classList.contains('nbgpu-r')) : [];
    const columns = htmls.filter(p => p.querySelector('.nbgpu-v')).map(
        p => Array.from(p.querySelectorAll('.nbgpu-v')).map(
            e => ({box: box(e), text: e.textContent.trim(), cut: cut(e)})));
    return {panel: box(panel),
            labels: rows.map(e => ({box: box(e), text: e.innerText.trim(), cut: cut(e)})),
            columns: columns,
            figures: Array.from(panel.querySelectorAll('.nbgpu-spark')).map(box)};
})"""


def _inside(inner: dict, outer: dict) -> bool:
    return (inner["x"] >= outer["x"] - 0.5 and inner["y"] >= outer["y"] - 0.5
            and inner["x"] + inner["w"] <= outer["x"] + outer["w"] + 0.5
            and inner["y"] + inner["h"] <= outer["y"] + outer["h"] + 0.5)


def _check_rows(p: dict, titles: list[str]) -> None:
    labels = p["labels"]
    assert [lb["text"].split()[:len(t.split())] for lb, t in zip(labels, titles, strict=False)] \
        == [t.split() for t in titles] and len(labels) == len(titles), [lb["text"] for lb in labels]
    xs = {round(lb["box"]["x"]) for lb in labels}
    assert len(xs) == 1, f"label boxes not at one x: {xs}"
    for a, b in itertools.pairwise(labels):
        assert a["box"]["y"] + a["box"]["h"] <= b["box"]["y"] + 0.5, "label boxes overlap"
    for lb in labels:
        assert lb["box"]["h"] > 0 and not lb["cut"], f"label cut: {lb['text']!r}"
        assert _inside(lb["box"], p["panel"]), f"label outside the panel: {lb['text']!r}"
    assert len(p["columns"]) >= 4
    for col in p["columns"]:
        assert len(col) == len(labels)
        for cell, lb in zip(col, labels, strict=True):
            mid_v = cell["box"]["y"] + cell["box"]["h"] / 2
            assert lb["box"]["y"] <= mid_v <= lb["box"]["y"] + lb["box"]["h"], \
                f"value {cell['text']!r} not level with {lb['text']!r}"
            assert not cell["cut"], f"value cut: {cell['text']!r}"
            assert _inside(cell["box"], p["panel"]), f"value outside the panel: {cell['text']!r}"
    for fig in p["figures"]:
        assert _inside(fig, p["panel"]), "a sparkline figure outside the panel"


def test_eight_gpus_and_mig_slices_readable_aligned_not_cut(tmp_path: Path) -> None:
    write_notebook(tmp_path / "many.ipynb", CELLS)
    with jupyter_server("jupyterlab", tmp_path) as server, \
            chromium_page(tmp_path / ".chromium", width=1440, height=1400) as page:
        page.goto(server.url("jupyterlab", "many.ipynb"))
        run_all_cells(page)
        page.wait_for_function(
            "() => document.querySelectorAll('.nbgpu-panel').length == 2 && Array.from("
            "document.querySelectorAll('.nbgpu-panel')).every(p => /\\d %/.test(p.textContent))",
            timeout=90_000)
        time.sleep(1.5)
        eight, mig = page.evaluate(GEOMETRY)
        mig_text = page.locator(".nbgpu-panel").nth(1).inner_text()
        page.locator(".nbgpu-panel").nth(0).screenshot(path=str(tmp_path / "eight.png"))
        page.locator(".nbgpu-panel").nth(1).screenshot(path=str(tmp_path / "mig.png"))

    _check_rows(eight, [f"GPU {i}" for i in range(8)] + ["host"])
    for col in eight["columns"]:
        assert all(re.search(r"\d", c["text"]) for c in col[:8]), [c["text"] for c in col]

    mig_titles = [lb["text"].split("\n")[0] for lb in mig["labels"]]
    slices = [i for i, t in enumerate(mig_titles) if "/" in t.split()[1]]
    assert len(slices) == 2, mig_titles
    _check_rows(mig, [" ".join(t.split()[:2]) for t in mig_titles])
    assert mig_text.count("MIG slice of GPU 0") == 2
    util, mem = mig["columns"][0], mig["columns"][1]
    for i in slices:
        assert util[i]["text"] == "n/a (MIG)", [c["text"] for c in util]
        assert re.fullmatch(r"[\d.]+/[\d.]+", mem[i]["text"]), [c["text"] for c in mem]
    assert re.fullmatch(r"\d+ %", util[len(mig_titles) - 2]["text"])  # GPU 1, not in MIG mode
