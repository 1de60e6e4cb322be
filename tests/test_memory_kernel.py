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
    reply, outputs = kernel.run("%gpumon free --outputs --traceback")
    assert reply["status"] == "ok" and "freed the output cache, the last traceback" in text(outputs), outputs
    held = names(kernel)
    assert {"model", "acts"} <= set(held)
    assert not [n for n in held if n.startswith("Out[") or "traceback" in n or n == "_"], held
    reply, outputs = kernel.run("%gpumon free nosuchname")
    assert reply["status"] == "error" and "no variable named nosuchname" in reply["evalue"]
    assert kernel.value("'model' in dir()")
