"""The live panel in a real browser: JupyterLab and Notebook 7, headless Chromium.

The sparklines must keep moving while another cell is busy, the values must be numbers,
and the text must follow the theme (dark text on light, light text on dark).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from conftest_panel import (
    assert_sparklines_moved,
    chromium_page,
    jupyter_server,
    panel_motion,
    run_all_cells,
    write_notebook,
)

pytestmark = pytest.mark.browser

CELLS = ["%load_ext nbgpu",
         "%gpumon --source sim --window 30",
         "import time\ntime.sleep(40)  # the panel must keep updating while this cell runs"]
TEXT_RGB = "() => getComputedStyle(document.querySelector('.nbgpu-p')).color"


def _luminance(css_rgb: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", css_rgb)[:3])
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def _check_panel(app: str, tmp_path: Path, theme: str | None) -> tuple[Path, object]:
    write_notebook(tmp_path / "panel.ipynb", CELLS)
    shots = tmp_path / "shots"
    shots.mkdir()
    with jupyter_server(app, tmp_path, theme=theme) as server, \
            chromium_page(tmp_path / ".chromium", width=1440) as page:
        page.goto(server.url(app, "panel.ipynb"))
        run_all_cells(page)
        before, after, values = panel_motion(page)
        busy = page.locator(".jp-InputPrompt", has_text="[*]").count()
        text = page.inner_text(".nbgpu-panel")
        rgb = page.evaluate(TEXT_RGB)
        readme = os.environ.get("NBGPU_README_SCREENSHOT")
        if readme and app == "jupyterlab":
            time.sleep(20)  # let the 30-s window fill for the picture
        shot = shots / f"panel-{app}.png"
        page.locator(".nbgpu-panel").screenshot(path=str(shot))
        if readme and app == "jupyterlab":
            cells = page.locator(".jp-Notebook .jp-Cell")
            top, last = cells.first.bounding_box(), cells.last.bounding_box()
            box = page.locator(".jp-Notebook").bounding_box()
            page.screenshot(path=readme, clip={"x": box["x"], "y": top["y"] - 8, "width": box["width"],
                                               "height": last["y"] + last["height"] - top["y"] + 16})

    assert busy >= 1, "the busy cell should still be running while the panel is checked"
    assert_sparklines_moved(before, after)  # while a cell was busy
    gpu_values = [v for v in values if v.strip() and v.strip() != "n/a"]
    assert gpu_values and all(re.search(r"\d", v) for v in gpu_values), values
    assert re.fullmatch(r"\d+ %", values[0]), values  # GPU 0 utilisation
    assert re.fullmatch(r"[\d.]+/\d+", values[3]), values  # GPU 0 memory (3 rows a column)
    assert "SIMULATED" in text and "GPU 0" in text and "host" in text and "GiB" in text  # its title
    assert shot.stat().st_size > 5_000
    return shot, _luminance(rgb)


def test_panel_moves_in_jupyterlab(tmp_path: Path) -> None:
    _, lum = _check_panel("jupyterlab", tmp_path, theme=None)
    assert lum < 0.5, "panel text should be dark on the light theme"


def test_panel_moves_in_notebook7_dark(tmp_path: Path) -> None:
    _, lum = _check_panel("notebook", tmp_path, theme="JupyterLab Dark")
    assert lum > 0.5, "panel text should be light on the dark theme"
