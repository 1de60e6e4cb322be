"""The live panel on real GPUs: a real kernel, the NVML source and a PyTorch loop beside it.

Skipped only where NVML is absent. Run on a GPU machine with
``python3 -m pytest -m gpu tests/test_panel_gpu.py -s`` (``-s`` prints what it saw).
"""

from __future__ import annotations

import pytest

from conftest_panel import kernel_session, max_per_second, show_in_kernel

pytestmark = pytest.mark.gpu

LOOP = """
import time
try:
    import torch
    cuda = torch.cuda.is_available()
except ImportError:
    cuda = False
t0 = time.time()
if cuda:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    while time.time() - t0 < 8.0:
        for _ in range(20):
            b = a @ a
        torch.cuda.synchronize()
else:
    time.sleep(8.0)
print("cuda" if cuda else "no-cuda")
"""
SUMMARY = """(lambda p, df: {
    "describe": p.sampler.status().source_description, "simulated": p.sampler.simulated,
    "gpus": len(p.sampler.devices),
    "util_max": float(df["util_pct"].max()), "power_max_w": float(df["power_w"].max()),
    "mem_max_gib": float(df["mem_used_bytes"].max()) / 2**30, "sampler_errors": p.sampler.errors,
    "panel": dict(p.stats)})(
    __import__("nbgpu").widgets.registry.panels()[0],
    __import__("nbgpu").widgets.registry.panels()[0].timeline.to_pandas())"""


def _nvml_or_skip() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as exc:  # no library, no driver, no GPU
        pytest.skip(f"NVML not available here: {exc}")


def test_panel_on_real_gpus_beside_pytorch() -> None:
    _nvml_or_skip()
    with kernel_session() as k:
        n = len(k.outputs)
        assert k.run("%load_ext nbgpu")["status"] == "ok"
        said = k.stdout_since(n)
        assert "driver" in said and "no GPU visible" not in said, said
        assert k.run("%gpumon --refresh 0.5")["status"] == "ok"
        assert show_in_kernel(k) == 1  # a front end's view of it is on screen
        lines = k.lines_ids()
        start = len(k.updates)
        n = len(k.outputs)
        assert k.run(LOOP, timeout=120)["status"] == "ok"
        cuda = k.stdout_since(n).split()[-1:] == ["cuda"]
        data = [u for u in k.updates[start:] if u.comm_id in lines and "y" in u.keys]
        assert len(data) >= 8 and len({u.buffers for u in data}) >= 4
        per_widget: dict[str, list[float]] = {}
        for u in k.updates:
            per_widget.setdefault(u.comm_id, []).append(u.time)
        assert max(max_per_second(ts) for ts in per_widget.values()) <= 4
        seen = k.value(SUMMARY)
        print(f"\npanel on real GPUs (cuda loop: {cuda}): {seen}")
        assert not seen["simulated"] and seen["gpus"] >= 1
        if cuda:
            assert seen["util_max"] > 50, seen
        assert k.run("%unload_ext nbgpu")["status"] == "ok"
        threads = "[t.name for t in __import__('threading').enumerate() if t.name.startswith('nbgpu')]"
        assert k.value(threads) == []
