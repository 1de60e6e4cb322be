"""Panels do not leak in a real kernel: 200 start/stop cycles with and without a notebook
cell id, and 60 ``%reload_ext``, keep RSS within 20 MB, each cycle as fast as the first, and
each stopped panel to two widgets."""

from __future__ import annotations

import statistics

import pytest

from conftest_panel import kernel_session

pytestmark = pytest.mark.kernel

CYCLES = 200
RELOADS = 60
RSS_MB = "__import__('psutil').Process().memory_info().rss / 2**20"
WIDGETS = "len(__import__('ipywidgets').widgets.widget._instances)"
SLOWER = 3.0  # the last 20 cycles may be this much slower than the first 20 (a loaded CI box)


def _cycles(k, cell_ids: bool) -> tuple[list[float], float, float, int, int]:
    """Run the cycles; returns (seconds per cycle, RSS before and after in MiB, widgets before/after)."""
    import time

    for _ in range(5):  # warm up: first imports, caches
        k.run("%gpumon --source sim --interval 0.1", cell_id="a" if cell_ids else None)
        k.run("%gpumon stop", cell_id="b" if cell_ids else None)
    k.run("import gc; gc.collect()")
    rss0, widgets0 = k.value(RSS_MB), k.value(WIDGETS)
    took = []
    for i in range(CYCLES):
        t0 = time.perf_counter()
        k.run("%gpumon --source sim --interval 0.1", cell_id=f"a{i % 3}" if cell_ids else None)
        k.run("%gpumon stop", cell_id=f"b{i % 3}" if cell_ids else None)
        took.append(time.perf_counter() - t0)
    k.run("import gc; gc.collect()")
    return took, rss0, k.value(RSS_MB), widgets0, k.value(WIDGETS)


@pytest.mark.parametrize("cell_ids", [False, True], ids=["no-cellId", "cellId"])
def test_start_stop_cycles_keep_rss_and_time_flat(cell_ids: bool) -> None:
    with kernel_session() as k:
        assert k.run("%load_ext nbgpu")["status"] == "ok"
        took, rss0, rss1, w0, w1 = _cycles(k, cell_ids)
    first, last = statistics.median(took[:20]), statistics.median(took[-20:])
    print(f"{CYCLES} cycles ({'with' if cell_ids else 'without'} cellId): RSS {rss0:.1f} -> "
          f"{rss1:.1f} MiB ({rss1 - rss0:+.1f}); widgets {w0} -> {w1}; cycle median first 20 "
          f"{first * 1000:.0f} ms, last 20 {last * 1000:.0f} ms")
    assert rss1 - rss0 <= 20.0
    assert last <= SLOWER * first
    # A stopped panel on screen is its box and header; re-run cells replace theirs (3 cells).
    assert w1 - w0 <= 2 * (3 if cell_ids else CYCLES)


def test_reload_ext_keeps_rss_flat() -> None:
    with kernel_session() as k:
        assert k.run("%load_ext nbgpu")["status"] == "ok"
        k.run("%gpumon --source sim --interval 0.1")
        for _ in range(5):
            k.run("%reload_ext nbgpu")
        rss0 = k.value(RSS_MB)
        for _ in range(RELOADS):
            k.run("%reload_ext nbgpu")
            k.run("%gpumon --source sim --interval 0.1")
        k.run("import gc; gc.collect()")
        rss1 = k.value(RSS_MB)
    print(f"{RELOADS} %reload_ext: RSS {rss0:.1f} -> {rss1:.1f} MiB ({rss1 - rss0:+.1f})")
    assert rss1 - rss0 <= 20.0
