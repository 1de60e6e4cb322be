"""nbgpu as a small Voilà dashboard, in a real browser.

Voilà serves notebooks/voila-dashboard.ipynb on 127.0.0.1 (and nowhere else); headless
Chromium opens the page. The panel must render with the code hidden, its sparklines must
move over two seconds and its values must be numbers. Without a GPU the dashboard falls
back to simulated GPUs, and says SIMULATED.

``NBGPU_UPDATE_SCREENSHOTS=1`` also writes the picture to docs/screenshots/panel-voila.png.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import time
from pathlib import Path

import nbformat
import psutil
import pytest
from nbclient import NotebookClient

from conftest_panel import DASHBOARD_ENV, assert_sparklines_moved, chromium_page, panel_motion, voila_server

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "voila-dashboard.ipynb"
SCREENSHOT = ROOT / "docs" / "screenshots" / "panel-voila.png"
STDERR_OUTPUTS = "[data-mime-type='application/vnd.jupyter.stderr']"
UPDATE_DOCS = os.environ.get("NBGPU_UPDATE_SCREENSHOTS") == "1"


def _listening(processes: list[psutil.Process]) -> set[str]:
    """The addresses every listening TCP socket of ``processes`` is bound to."""
    found = set()
    for p in processes:
        for conn in p.net_connections(kind="tcp"):
            if conn.status == psutil.CONN_LISTEN:
                found.add(conn.laddr.ip)
    return found


def _gpu_visible() -> bool:
    """Whether NVML sees a GPU here (what the dashboard itself asks before it picks)."""
    import nbgpu

    try:
        nbgpu.Sampler("auto", host=False, diagnostics=False).stop()
    except nbgpu.NVMLUnavailableError:
        return False
    return True


def test_voila_dashboard_moves_in_chromium(tmp_path: Path) -> None:
    shot = tmp_path / "panel-voila.png"
    with voila_server(NOTEBOOK, tmp_path) as (url, server), \
            chromium_page(tmp_path / "chromium", width=1280, height=720) as page:
        page.goto(url, timeout=120_000)
        before, after, values = panel_motion(page, timeout_ms=120_000)
        panel_text = page.inner_text(".nbgpu-panel")
        page_text = page.inner_text("body")
        errors = page.locator(STDERR_OUTPUTS).all_inner_texts()
        listening = _listening([server, *server.children(recursive=True)])
        if UPDATE_DOCS:
            time.sleep(20)  # let the sparklines fill part of the window for the picture
        box = page.locator(".nbgpu-panel").bounding_box()
        bottom = box["y"] + box["height"] + 16
        page.screenshot(path=str(shot), clip={"x": 0, "y": 0, "width": 1280, "height": bottom})

    assert not errors, f"the dashboard printed errors: {errors}"
    assert "NBGPU_DASHBOARD_SOURCE" not in page_text, "Voilà should hide the notebook's code"
    assert_sparklines_moved(before, after)
    gpu_values = [v for v in values if v.strip() and v.strip() != "n/a"]
    assert gpu_values and all(re.search(r"\d", v) for v in gpu_values), values
    assert re.fullmatch(r"\d+ %", values[0]), values  # GPU 0 utilisation
    assert "GPU 0" in panel_text and "host" in panel_text, panel_text
    if _gpu_visible():
        assert "SIMULATED" not in panel_text, panel_text
    else:
        assert "SIMULATED" in panel_text, "without a GPU the dashboard should show simulated GPUs"
    assert listening and listening <= {"127.0.0.1"}, f"listening beyond 127.0.0.1: {listening}"
    assert shot.stat().st_size > 5_000
    if UPDATE_DOCS:
        shutil.copyfile(shot, SCREENSHOT)


PROBE = """
from nbgpu.widgets import registry
(panel,) = registry.panels()
panel.refresh(force=True)
def texts(w):
    yield str(getattr(w, "value", ""))
    for child in getattr(w, "children", ()):
        yield from texts(child)
shown = " ".join(texts(panel))
print(repr((panel.window_s, "GPU 0" in shown, "GPU 1" in shown, "SIMULATED" in shown)))
"""


def _run_dashboard(tmp_path: Path, monkeypatch, settings: dict[str, str], probe: str) -> list:
    """Run the dashboard notebook, then ``probe``, in a kernel whose environment has ``settings``;
    returns the code cells, run."""
    for name in DASHBOARD_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(probe))
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert not errors, errors
    return code


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_dashboard_settings_reach_the_panel(tmp_path: Path, monkeypatch) -> None:
    """The environment variables docs/voila.md names choose the source, the GPUs and the window."""
    settings = {"NBGPU_DASHBOARD_SOURCE": "sim", "NBGPU_DASHBOARD_GPUS": "1", "NBGPU_DASHBOARD_WINDOW": "30"}
    code = _run_dashboard(tmp_path, monkeypatch, settings, PROBE)
    window_s, gpu0, gpu1, simulated = ast.literal_eval(_stdout(code[-1]).strip())
    assert window_s == 30
    assert gpu1 and not gpu0, "NBGPU_DASHBOARD_GPUS=1 should show GPU 1 alone"
    assert simulated


def test_refused_settings_are_said_on_the_page(tmp_path: Path, monkeypatch) -> None:
    """Voilà hides a cell's error from the page, so a refused setting must be printed instead."""
    settings = {"NBGPU_DASHBOARD_SOURCE": "sim", "NBGPU_DASHBOARD_WINDOW": "2"}
    code = _run_dashboard(tmp_path, monkeypatch, settings,
                          "from nbgpu.widgets import registry\nprint(len(registry.panels()))")
    panel_cell = next(c for c in code if "%gpumon" in c.source)
    said = _stdout(panel_cell)
    assert said.startswith("The dashboard's settings were refused:") and "--window" in said, said
    assert said.count("\n") == 1, said
    assert _stdout(code[-1]).strip() == "0", "no panel should open with a refused setting"


LAYOUT_JS = """() => {
  const panel = document.querySelector('.nbgpu-panel');
  const pr = panel.getBoundingClientRect();
  const scrollers = [];
  for (let e = document.querySelector('.nbgpu-t'); e && e !== document.body; e = e.parentElement) {
    const s = getComputedStyle(e);
    if (e.scrollWidth > e.clientWidth + 1 && ['auto', 'scroll'].includes(s.overflowX)) scrollers.push(e);
  }
  const titles = [...document.querySelectorAll('.nbgpu-t')].map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent.trim(), left: r.left, right: r.right};
  });
  // "every N s" of the header: all on one line?
  const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
  let every = null;
  while (walker.nextNode()) {
    const n = walker.currentNode, i = n.textContent.search(/every\\s\\S+\\s+s\\b/);
    if (i >= 0) {
      const m = n.textContent.slice(i).match(/every\\s\\S+\\s+s\\b/)[0];
      const range = document.createRange();
      range.setStart(n, i); range.setEnd(n, i + m.length);
      every = [...range.getClientRects()].map(r => Math.round(r.top));
      break;
    }
  }
  return {panelRight: Math.min(pr.right, window.innerWidth), titles, scrollable: scrollers.length,
          every, pageWidth: document.documentElement.scrollWidth, viewport: window.innerWidth};
}"""


@pytest.mark.parametrize("width", [760, 1024])
def test_dashboard_reads_at_narrow_widths(tmp_path: Path, width: int) -> None:
    """At 760 and 1024 px: every column can be seen (it fits, or its box scrolls to it), the
    header's "every 1 s" stays on one line, no stream output breaks words, visitors get no
    %load_ext hint, and no simulated memory is put on the dashboard's own kernel."""
    with voila_server(NOTEBOOK, tmp_path) as (url, _server), \
            chromium_page(tmp_path / "chromium", width=width, height=800) as page:
        page.goto(url, timeout=120_000)
        panel_motion(page, timeout_ms=120_000)
        time.sleep(3.0)  # the processes line comes with a later refresh
        layout = page.evaluate(LAYOUT_JS)
        page_text = page.inner_text("body")
        streams = page.locator("[data-mime-type^='application/vnd.jupyter.std']").count()
        page.screenshot(path=str(tmp_path / f"voila-{width}.png"), full_page=True)
    titles = layout["titles"]
    assert len(titles) >= 5, titles
    cut = [t["text"] for t in titles if t["right"] > layout["panelRight"] + 1]
    assert not cut or layout["scrollable"], f"columns cut with nothing to scroll: {cut} ({layout})"
    assert layout["pageWidth"] <= layout["viewport"], layout  # the page itself never scrolls sideways
    assert layout["every"] and len(set(layout["every"])) == 1, layout["every"]
    assert streams == 0, "a stream output (monospace, broken mid-word) on the dashboard"
    assert "%load_ext" not in page_text and "%gpumon" not in page_text, page_text
    if not _gpu_visible():
        assert "this kernel" not in page_text, page_text
