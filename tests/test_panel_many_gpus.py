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
from nbgpu.widgets.tree import descendants

T0 = 1.7e9


class FakeClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _plain(fragment: str) -> list[str]:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split()


def _panel(sim: SimulatedGPUs, seconds: float = 6.0):
    """A panel on a sampler stepped for ``seconds`` of fake time, refreshed once."""
    clock = FakeClock(T0)
    s = Sampler(sim, interval=0.1, clock=clock)
    for k in range(int(seconds / 0.02)):
        clock.t = T0 + k * 0.02
        s.step(clock.t)
    mon = GPUMonitor(sampler=s, start=False, processes=False)
    mon.refresh(force=True, now=clock.t)
    return s, mon


def _state(mon: GPUMonitor) -> dict:
    """Labels, columns (title, values per row) and each line mark's y rows, from get_state()."""
    html_values = [w.get_state()["value"] for w in descendants(mon) if type(w).__name__ == "HTML"]
    labels = next(v for v in html_values if "<b>GPU " in v)
    titles = [w for w in descendants(mon) if type(w).__name__ == "VBox" and w is not mon]
    columns = {}
    for box in titles:
        kids = box.children
        if len(kids) == 2 and type(kids[1]).__name__ == "HBox":
            title = " ".join(_plain(kids[0].get_state()["value"]))
            fig, values = kids[1].children
            rows = [" ".join(_plain(r)) for r in re.findall(
                r'<div class="nbgpu-r[^"]*nbgpu-v[^"]*"[^>]*>(.*?)</div>', values.get_state()["value"])]
            lines = fig.marks[1]
            columns[title] = {"values": rows, "y": np.asarray(lines.y, dtype=float)}
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


def test_eight_gpus_each_have_a_row_in_order_with_numbers() -> None:
    s, mon = _panel(SimulatedGPUs(8, seed=3))
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


def test_mig_slices_show_their_memory_and_say_what_mig_does_not_report() -> None:
    s, mon = _panel(SimulatedGPUs(2, mig={0: 2}, seed=3))
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
        assert labels_html.count("MIG slice of GPU 0") == 2
        mem_bands = _bands_hold(mem["y"], len(keys) + 1)
        assert len(set(mem_bands)) == len(mem_bands) >= len(keys)  # one band per row, no overlap
    finally:
        mon.close()
        s.stop()
