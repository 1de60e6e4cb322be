"""The panel with 8 GPUs and with MIG slices: every row there, in order, in its own band;
values per slice where NVML gives them and "n/a (MIG)" where it does not.

Widget-level (``get_state()`` of the panel's widgets, a fake clock driving the sampler);
the same checked in headless Chromium by ``test_panel_many_gpus_browser.py``.
"""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

from nbgpu import Sampler, SimulatedGPUs
from nbgpu.widgets import registry
from nbgpu.widgets.monitor import GPUMonitor
from nbgpu.widgets.panel_draw import COLUMN_PX, SPARK_PX
from nbgpu.widgets.registry import descendants

T0 = 1.7e9


def _plain(fragment: str) -> list[str]:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split()


def _panel(stepped, sim: SimulatedGPUs, seconds: float = 6.0):
    """A panel on a sampler stepped for ``seconds`` of fake time, refreshed once."""
    clock = stepped.new_clock(T0)
    s = Sampler(sim, interval=0.1, clock=clock)
    for k in range(int(seconds / 0.02)):
        clock.t = T0 + k * 0.02
        s.step(clock.t)
    mon = GPUMonitor(sampler=s, start=False, processes=False)
    mon.refresh(force=True, now=clock.t)
    return s, mon


def _state(mon: GPUMonitor) -> dict:
    """Labels, columns (title, values per row) and the y rows each column's lines draw, from
    get_state(): a line belongs to the column whose sparkline pixels its x lies in."""
    html_values = [w.get_state()["value"] for w in descendants(mon) if type(w).__name__ == "HTML"]
    labels = next(v for v in html_values if "<b>GPU " in v)
    grid = next(v for v in html_values if 'class="nbgpu-c"' in v)
    figure = next(w for w in descendants(mon) if type(w).__name__ == "Figure")
    lines = figure.marks[1]
    x, y = np.asarray(lines.x, dtype=float), np.asarray(lines.y, dtype=float)
    columns = {}
    for c, block in enumerate(grid.split('<div class="nbgpu-c">')[1:]):
        title = " ".join(_plain(re.search(r'<div class="[^"]*nbgpu-t[^"]*"[^>]*>(.*?)</div>', block)[1]))
        rows = [" ".join(_plain(r)) for r in re.findall(
            r'<div class="nbgpu-r[^"]*nbgpu-v[^"]*"[^>]*>(.*?)</div>', block)]
        left = c * COLUMN_PX
        mine = [(row_x >= left - 1e-3).all() and (row_x <= left + SPARK_PX + 1e-3).all()
                for row_x in x]
        columns[title] = {"values": rows, "y": y[np.array(mine, bool)]}
    rows = re.findall(r"<b>(.*?)</b>", labels)
    return {"labels": [html.unescape(r) for r in rows], "columns": columns}


@pytest.fixture(autouse=True)
def _clean():
    yield
    registry.close_all()


def _bands_hold(y: np.ndarray, bands: int) -> list[int]:
    """Band of each trace (row of the y array), asserting it stays inside that band."""
    out = []
    for row in y:
        finite = row[np.isfinite(row)]
        if not len(finite):
            continue
        band = int(np.floor(finite.min()))
        assert finite.max() <= band + 1, "a sparkline leaves its row's band"
        assert 0 <= band < bands
        out.append(band)
    return out


def test_eight_gpus_each_have_a_row_in_order_with_numbers(stepped) -> None:
    s, mon = _panel(stepped, SimulatedGPUs(8, seed=3))
    try:
        st = _state(mon)
        assert st["labels"] == [f"GPU {i}" for i in range(8)] + ["host"]
        assert len(st["columns"]) >= 4
        for title, col in st["columns"].items():
            assert len(col["values"]) == 9, title
            assert all(re.search(r"\d", v) for v in col["values"][:8]), (title, col["values"])
            bands = _bands_hold(col["y"], 9)
            assert set(bands) >= set(range(1, 9)), title  # every GPU row drew a line
    finally:
        mon.close()
        s.stop()


def test_mig_slices_show_their_memory_and_say_what_mig_does_not_report(stepped) -> None:
    s, mon = _panel(stepped, SimulatedGPUs(2, mig={0: 2}, seed=3))
    try:
        st = _state(mon)
        keys = [d.key for d in s.devices]
        slices = [d.key for d in s.devices if d.mig]
        assert len(slices) == 2 and all(d.parent == 0 for d in s.devices if d.mig)
        assert st["labels"] == [f"GPU {k}" for k in keys] + ["host"]
        util = next(c for t, c in st["columns"].items() if "util" in t.lower())
        mem = next(c for t, c in st["columns"].items() if "mem" in t.lower())
        for i, key in enumerate(keys):
            dev = s.devices[i]
            if dev.mig:
                assert util["values"][i] == "n/a (MIG)", util["values"]
                assert re.fullmatch(r"[\d.]+/[\d.]+", mem["values"][i]), mem["values"]
            elif key in {d.parent for d in s.devices if d.mig}:  # a card in MIG mode
                assert util["values"][i] == "n/a (MIG)", util["values"]
            else:
                assert re.fullmatch(r"\d+ %", util["values"][i]), (key, util["values"])
        labels_html = " ".join(w.get_state()["value"] for w in descendants(mon)
                               if type(w).__name__ == "HTML")
        assert labels_html.count(">MIG slice of GPU 0<") == 2  # (and in the tooltips)
        mem_bands = _bands_hold(mem["y"], len(keys) + 1)
        assert len(set(mem_bands)) == len(mem_bands) >= len(keys)  # one band per row, no overlap
    finally:
        mon.close()
        s.stop()
