"""%gpumon memory and %gpumon free in a real IPython kernel with torch (CPU tensors)."""

from __future__ import annotations

import pytest

from conftest_profiles import kernel_fixture  # noqa: F401 - fixture

pytest.importorskip("torch")
pytestmark = pytest.mark.kernel


def text(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") for o in outputs if o["msg_type"] == "stream")


def names(kernel) -> dict:
    return kernel.value("dict(zip(*[nbgpu.memory_by_name(device='cpu')[c].tolist() "
                        "for c in ('name', 'bytes')]))")


def test_memory_lists_names_outputs_and_traceback_locals_and_free_drops_them(kernel):
    reply, outputs = kernel.run("import torch, nbgpu\n%load_ext nbgpu\n"
                                "model = torch.nn.Linear(100, 100)\n"
                                "acts = [torch.zeros(1000) for _ in range(3)]")
    assert reply["status"] == "ok", outputs
    reply, outputs = kernel.run("torch.ones(2000)")
    assert reply["status"] == "ok", outputs
    reply, _ = kernel.run("def f():\n    big = torch.zeros(10_000_000)\n    raise ValueError()\nf()")
    assert reply["status"] == "error"
    held = names(kernel)
    assert held["model"] == (100 * 100 + 100) * 4 and held["acts"] == 3 * 4000
    out = [n for n in held if n.startswith("Out[")]
    assert len(out) == 1 and held[out[0]] == 8000
    assert held["f: big (traceback)"] == 40_000_000
    reply, outputs = kernel.run("%gpumon memory")
    shown = text(outputs)
    assert reply["status"] == "ok" and "model" in shown and "38.1 MiB" in shown, outputs
    assert "%gpumon free gives back: --outputs 7.8 KiB, --traceback 38.1 MiB, --all-hidden 38.2 MiB" in shown
    reply, outputs = kernel.run("%gpumon free --outputs --traceback")
    assert reply["status"] == "ok" and "freed the output cache, the last traceback" in text(outputs), outputs
    held = names(kernel)
    assert {"model", "acts"} <= set(held)
    assert not [n for n in held if n.startswith("Out[") or "traceback" in n or n == "_"], held
    reply, outputs = kernel.run("%gpumon free nosuchname")
    assert reply["status"] == "error" and "no variable named nosuchname" in reply["evalue"]
    assert kernel.value("'model' in dir()")


OOM_CELL = """%%gpumon --source sim --interval 0.1
blocks = []
def fill():
    chunk = []
    spare = torch.zeros(2_500_000)  # 9.5 MiB only this frame holds
    for _ in range(4):
        chunk.append(torch.zeros(1 << 20))  # 4 MiB each, CPU standing in for CUDA
        blocks.append(chunk[-1])
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB. "
                                 "GPU 0 has a total capacity of 139.8 GiB")
fill()
"""


def test_the_oom_post_mortem_names_the_holders_and_what_freeing_the_traceback_gives(kernel):
    # CPU tensors stand for CUDA ones: the post-mortem walks the device ``cuda_device`` names
    reply, outputs = kernel.run("import torch, nbgpu, nbgpu.holders\n%load_ext nbgpu\n"
                                "nbgpu.holders.cuda_device = lambda *a, **k: 'cpu'")
    assert reply["status"] == "ok", outputs
    reply, outputs = kernel.run(OOM_CELL)
    assert reply["status"] == "error" and reply["ename"] == "OutOfMemoryError"
    story = next(o["data"]["text/plain"] for o in outputs if o["msg_type"] == "display_data")
    assert story.startswith("GPU out of memory"), story
    assert "    `blocks`: list of 4 tensors, 16.0 MiB, shared with fill: chunk (traceback)" in story
    assert "`fill: spare (traceback)`: tensor float32 (2500000,), 9.5 MiB" in story
    assert "`%gpumon free --traceback` gives back 9.5 MiB (the failed cell's locals)" in story
    html = next(o["data"]["text/html"] for o in outputs if o["msg_type"] == "display_data")
    assert "`blocks`: list of 4 tensors, 16.0 MiB" in html
    reply, outputs = kernel.run("import weakref\n_w = [weakref.ref(t) for t in blocks]")
    assert reply["status"] == "ok", outputs
    reply, outputs = kernel.run("%gpumon free blocks --traceback")
    assert reply["status"] == "ok" and "freed blocks, the last traceback" in text(outputs), outputs
    assert kernel.value("[w() is None for w in _w]") == [True] * 4  # nothing else kept them


def test_every_cell_mode_names_the_failed_cells_locals_at_an_oom(kernel):
    reply, outputs = kernel.run("import torch, nbgpu.holders\n%load_ext nbgpu\n"
                                "nbgpu.holders.cuda_device = lambda *a, **k: 'cpu'\n"
                                "%gpumon --source sim --cells --cells-min 30")
    assert reply["status"] == "ok", outputs
    reply, outputs = kernel.run("def step():\n    acts = [torch.zeros(1 << 18) for _ in range(2)]\n"
                                "    raise torch.OutOfMemoryError('CUDA out of memory.')\nstep()")
    assert reply["status"] == "error"
    story = next(o["data"]["text/plain"] for o in outputs if o["msg_type"] == "display_data")
    assert "    `step: acts (traceback)`: list of 2 tensors, 2.0 MiB" in story, story
    assert "`%gpumon free --traceback` gives back 2.0 MiB (the failed cell's locals)" in story
    kernel.run("%gpumon --cells off\n%gpumon free --traceback")
