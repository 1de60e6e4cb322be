"""In headless Chromium, a panel the page does not show gets no update from the kernel.

Scrolled out of view, or its tab hidden behind another: the kernel sends the page no widget
update; back on screen, updates resume. In JupyterLab this holds while another cell is busy
(the views' messages reach the kernel on a thread of their own). The updates are counted
as the page receives them, on its kernel websocket.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest_panel import (
    NOTEBOOK_VOILA,
    PageUpdates,
    chromium_page,
    jupyter_server,
    run_all_cells,
    voila_server,
    write_notebook,
)

pytestmark = [pytest.mark.browser, pytest.mark.kernel]

CELLS = ["%load_ext nbgpu",
         "%gpumon --source sim --refresh 0.25 --window 30",
         "print('\\n'.join(f'line {i}' for i in range(300)))  # a long output to scroll to",
         "import time\ntime.sleep(90)  # busy while the panel is shown, hidden and shown again"]
IN_VIEW = """() => { const r = document.querySelector('.nbgpu-panel').getBoundingClientRect();
    return r.bottom > 0 && r.top < window.innerHeight && r.height > 0; }"""
TO_END = """() => { const end = document.createElement('div');
    end.style.height = '4000px'; end.id = 'nbgpu-test-end';
    const host = document.querySelector('.jp-WindowedPanel-outer') ? null : document.body;
    if (host) host.appendChild(end);
    const outer = document.querySelector('.jp-WindowedPanel-outer');
    if (outer) { outer.scrollTop = outer.scrollHeight; } else { end.scrollIntoView(); } }"""
TO_TOP = """() => { const outer = document.querySelector('.jp-WindowedPanel-outer');
    if (outer) outer.scrollTop = 0;
    document.querySelector('.nbgpu-panel').scrollIntoView(); }"""


def _tab_shown(page, shown: bool) -> None:
    """What the page sees when its tab goes behind another (or comes back): headless Chromium
    keeps every page visible, so the page's ``visibilityState`` is set as a browser sets it
    and its ``visibilitychange`` event fired."""
    page.evaluate("""(shown) => {
        Object.defineProperty(document, 'visibilityState', {configurable: true,
            get: () => shown ? 'visible' : 'hidden'});
        Object.defineProperty(document, 'hidden', {configurable: true, get: () => !shown});
        document.dispatchEvent(new Event('visibilitychange')); }""", shown)


def _off_and_on(page, updates: PageUpdates, seen: int) -> None:
    """Shown: at least ``seen`` updates in 4 s; scrolled away or tab hidden: none; back: again."""
    assert updates.during(4.0) >= seen, "no updates while the panel is on screen"
    page.evaluate(TO_END)
    page.wait_for_function(f"() => !({IN_VIEW})()", timeout=10_000)
    updates.during(1.0)  # what was on its way
    assert updates.during(4.0) == 0, "updates kept coming with the panel scrolled out of view"
    page.evaluate(TO_TOP)
    page.wait_for_function(IN_VIEW, timeout=10_000)
    assert updates.during(4.0) >= seen, "updates did not resume back in view"
    _tab_shown(page, False)
    updates.during(1.0)
    assert updates.during(4.0) == 0, "updates kept coming with the tab hidden"
    _tab_shown(page, True)
    assert updates.during(4.0) >= seen, "updates did not resume with the tab shown"


def test_jupyterlab_sends_nothing_to_a_panel_out_of_sight(tmp_path: Path) -> None:
    write_notebook(tmp_path / "panel.ipynb", CELLS)
    with jupyter_server("jupyterlab", tmp_path) as server, \
            chromium_page(tmp_path / ".chromium") as page:
        updates = PageUpdates(page)
        page.goto(server.url("jupyterlab", "panel.ipynb"))
        run_all_cells(page)
        page.wait_for_selector(".nbgpu-spark path.line", state="attached", timeout=90_000)
        page.wait_for_selector(".jp-InputPrompt:has-text('[*]')", timeout=30_000)
        _off_and_on(page, updates, seen=4)
        busy = page.locator(".jp-InputPrompt", has_text="[*]").count()
    assert busy >= 1, "the busy cell should have run throughout"


def test_voila_sends_nothing_to_a_panel_out_of_sight(tmp_path: Path) -> None:
    with voila_server(NOTEBOOK_VOILA, tmp_path) as (url, _server), \
            chromium_page(tmp_path / ".chromium") as page:
        updates = PageUpdates(page)
        page.goto(url, timeout=120_000)
        page.wait_for_selector(".nbgpu-spark path.line", state="attached", timeout=120_000)
        _off_and_on(page, updates, seen=2)  # its 1 min window refreshes every 2 s
