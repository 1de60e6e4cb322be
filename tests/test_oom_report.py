"""The OOM post-mortem in a real kernel on simulated GPUs, with a stand-in PyTorch and OOM error."""

from __future__ import annotations

import json

import pytest

from conftest_profiles import kernel_fixture  # noqa: F401 - fixture
from nbgpu.profiles.oom import _user_frames, is_oom, requested_bytes

pytestmark = pytest.mark.kernel

GIB = 1024**3

# A stand-in for the parts of torch.cuda nbgpu reads: 2 devices, 3 GiB allocated and 4 GiB
# reserved on each, and an allocator snapshot with stacks (as with history recording on).
FAKE_TORCH = f'''
import sys, types
torch = types.ModuleType("torch")
cuda = types.SimpleNamespace()
cuda.is_initialized = lambda: True
cuda.device_count = lambda: 2
cuda.memory_allocated = lambda i=0: 3 * {GIB}
cuda.memory_reserved = lambda i=0: 4 * {GIB}
cuda.max_memory_allocated = lambda i=0: 3 * {GIB}
cuda.max_memory_reserved = lambda i=0: 4 * {GIB}
cuda.reset_peak_memory_stats = lambda i=0: None
cuda.get_device_properties = lambda i: types.SimpleNamespace(uuid="")
def _snapshot():
    frame = lambda f, n, line: {{"filename": f, "name": n, "line": line}}
    blocks = [{{"size": 2 * {GIB}, "state": "active_allocated",
               "frames": [frame("/x/site-packages/torch/nn/modules/linear.py", "forward", 116),
                          frame("/home/me/train.py", "make_batch", 12),
                          frame("/home/me/train.py", "step", 30)]}},
              {{"size": {GIB}, "state": "active_allocated",
               "frames": [frame("/home/me/model.py", "__init__", 7)]}},
              {{"size": 5 * {GIB}, "state": "inactive", "frames": []}}]
    return {{"segments": [{{"device": 0, "blocks": blocks}}]}}
cuda.memory = types.SimpleNamespace(_snapshot=_snapshot)
torch.cuda = cuda
sys.modules["torch"] = torch
class OutOfMemoryError(RuntimeError):
    pass
MSG = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 139.8 GiB "
       "of which 1.2 GiB is free.")
'''


def test_detection_by_class_name_and_message():
    class OutOfMemoryError(RuntimeError):
        pass

    class ResourceExhaustedError(Exception):
        pass

    assert is_oom(OutOfMemoryError("x")) and is_oom(ResourceExhaustedError("y"))
    assert is_oom(RuntimeError("CUDA error: out of memory"))
    wrapped = ValueError("step failed")
    wrapped.__cause__ = RuntimeError("RESOURCE_EXHAUSTED: OOM when allocating tensor")
    assert is_oom(wrapped)
    assert not is_oom(MemoryError("host RAM")) and not is_oom(ValueError("bad input"))
    assert requested_bytes("Tried to allocate 2.00 GiB. GPU 0") == 2 * GIB
    assert requested_bytes("no size") != requested_bytes("no size")  # NaN


@pytest.fixture(scope="module")
def oom_kernel(kernel):
    # simulated GPUs from the start, so no test depends on which ran before it
    reply, outputs = kernel.run("%load_ext nbgpu\nimport nbgpu, time, sys\nfrom nbgpu import session\n"
                                "session.ensure_sampler('sim', 0.1)\n" + FAKE_TORCH)
    assert reply["status"] == "ok", outputs
    return kernel


def _texts(outputs: list[dict]) -> list[str]:
    return [o["data"].get("text/plain", "") for o in outputs if o["msg_type"] == "display_data"]


def test_allocation_stacks_name_the_users_python_frames_not_the_allocators_cpp():
    # what torch.cuda.memory._record_memory_history() records by default (seen on an H200):
    # C++ unwinder frames first, then torch's Python, then the user's cell
    frames = [{"filename": "??", "line": 0, "name": "torch::unwind::unwind()"},
              {"filename": "memory_snapshot.cpp", "line": 0, "name": "gather_with_cpp()"},
              {"filename": "/usr/lib/python3/site-packages/torch/cuda/memory.py", "line": 9, "name": "f"},
              {"filename": "/tmp/ipykernel_71/2840.py", "line": 2, "name": "<listcomp>"},
              {"filename": "/tmp/ipykernel_71/2840.py", "line": 2, "name": "<module>"},
              {"filename": "/work/train.py", "line": 40, "name": "step"}]
    assert _user_frames(frames)[:2] == ("2840.py:2 in <listcomp>", "2840.py:2 in <module>")
    assert not any("cpp" in f or "??" in f for f in _user_frames(frames))


def test_gpumon_cell_oom_leads_with_the_memory_story_and_reraises_unchanged(oom_kernel):
    reply, outputs = oom_kernel.run(
        "%%gpumon --source sim --interval 0.1\ntime.sleep(0.5)\nerr = OutOfMemoryError(MSG)\nraise err")
    assert reply["status"] == "error" and reply["ename"] == "OutOfMemoryError"
    assert reply["evalue"] == oom_kernel.value("MSG")
    assert "raise err" in "".join(reply["traceback"])  # the user's own frame, not ours
    texts = _texts(outputs)
    assert texts[0].startswith("GPU out of memory: OutOfMemoryError: CUDA out of memory")
    story = texts[0]
    assert "the failed request: 2.0 GiB" in story
    assert "GPU 1 (the one that failed)" in story
    assert "pytorch: allocated 3.0 GiB, reserved 4.0 GiB, outside it" in story
    assert "2.0 GiB on cuda:0 at train.py:12 in make_batch < train.py:30 in step" in story
    assert "1.0 GiB on cuda:0 at model.py:7 in __init__" in story
    assert texts[1].startswith("GPU profile") and "failed" in texts[1]
    html = next(o["data"]["text/html"] for o in outputs if o["msg_type"] == "display_data")
    assert "<svg" in html and "out of memory" in html and 'class="nbgpu-oom"' in html
    # The same exception object, with its traceback, is what IPython kept.
    assert oom_kernel.value("sys.last_value is err and sys.last_traceback is err.__traceback__") is True
    got = oom_kernel.value("[(g.gpu, g.nvml_used_bytes > 0, g.outside_framework_bytes == "
                           "g.nvml_used_bytes - 4 * 1024**3) for g in "
                           "nbgpu.profiles.oom.build_story(nbgpu.profiles.history.records()[-1].capture, "
                           "err).gpus]")
    assert got == [[0, True, True], [1, True, True]]


def test_cells_mode_oom_reports_even_a_short_cell(oom_kernel):
    reply, _ = oom_kernel.run("%gpumon --cells --cells-min 30")
    assert reply["status"] == "ok"
    reply, outputs = oom_kernel.run("raise RuntimeError('CUDA error: out of memory')", cell_id="c-oom")
    assert reply["status"] == "error" and reply["evalue"] == "CUDA error: out of memory"
    texts = _texts(outputs)
    assert texts and texts[0].startswith("GPU out of memory: RuntimeError: CUDA error: out of memory")
    _, quiet = oom_kernel.run("raise ValueError('not memory')", cell_id="c-val")
    assert _texts(quiet) == []  # an ordinary short failure stays quiet
    oom_kernel.run("%gpumon --cells off")


def test_snapshot_on_alert_writes_timeline_and_allocator(oom_kernel, tmp_path):
    path = tmp_path / "snap.json"
    reply, outputs = oom_kernel.run(
        "from nbgpu.diagnostics.alerts import Alert\n"
        "_s = nbgpu.Sampler(nbgpu.SimulatedGPUs(count=1, seed=3), interval=0.1).start()\n"
        "time.sleep(0.5)\n"
        f"_cb = nbgpu.snapshot_on_alert({str(path)!r}, _s)\n"
        "_cb(Alert('oom_risk', 'warning', 0, time.time(), None, 'memory at 91 %', ''))\n"
        f"_w = __import__('os').path.exists({str(path)!r})\n"
        "_cb(Alert('oom_risk', 'critical', 0, time.time(), None, 'memory at 96 %', ''))\n"
        "_s.stop()")
    assert reply["status"] == "ok", outputs
    assert oom_kernel.value("_w") is False  # a warning is below the asked severity
    data = json.loads(path.read_text())
    assert data["alert"]["severity"] == "critical" and data["framework"] == "pytorch"
    assert data["framework_memory"]["0"]["reserved_bytes"] == 4 * GIB
    assert data["allocator_history"] == "on" and data["largest_allocations"][0]["size_bytes"] == 2 * GIB
    mem = data["timeline"]["0"]["mem_used_bytes"]
    assert len(mem["time_s"]) == len(mem["values"]) >= 3
    reply, _ = oom_kernel.run(f"nbgpu.snapshot_on_alert({str(tmp_path / 'no' / 'x.json')!r}, _s)")
    assert reply["status"] == "error" and "does not exist" in reply["evalue"]
