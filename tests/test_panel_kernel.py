"""The panel in a real kernel (jupyter_client), as the browser would see its messages.

One kernel, in order: bad ``%gpumon`` input → UsageError and no thread; a panel on
simulated GPUs keeps sending new line data while a busy cell holds the main thread, no
widget more than 4 times a second even at ``--refresh 0.25`` and a fast sampler; a
re-run cell replaces its own panel; ``%reload_ext``/``%unload_ext`` leave no nbgpu
thread and no panel still sending.
"""

from __future__ import annotations

import time

import pytest

from conftest_panel import kernel_session, max_per_second, show_in_kernel

pytestmark = pytest.mark.kernel

THREADS = "sorted(t.name for t in __import__('threading').enumerate() if t.name.startswith('nbgpu'))"
BAD = {
    "%gpumon --interval -1": "--interval",
    "%gpumon --source sim --gpus 7": "GPU index 7 is out of range",
    "%gpumon --metrics bogus": "bogus",
    "%gpumon --frobnicate": "--frobnicate",
    "%%gpumon --interval 0\npass": "--interval",
}


def _threads(k, want: tuple[str, ...] = ("nbgpu-panels", "nbgpu-sampler")) -> list[str]:
    """nbgpu's threads, once they are ``want`` (the views' messages are handled on their own
    thread, beside the cell that asks) or after 10 s."""
    end = time.monotonic() + 10
    while (got := k.value(THREADS)) != list(want) and time.monotonic() < end:
        time.sleep(0.1)
    return got


def test_panel_in_a_real_kernel() -> None:
    with kernel_session() as k:
        reply = k.run("%load_ext nbgpu")
        assert reply["status"] == "ok"
        said = k.stdout_since(0)
        assert said.startswith("nbgpu ") and ("GPU" in said) and said.count("\n") == 1, said

        for line, named in BAD.items():
            reply = k.run(line)
            assert reply["status"] == "error" and reply["ename"] == "UsageError", (line, reply)
            assert named in reply["evalue"], (line, reply["evalue"])
            assert "\n" not in reply["evalue"]
        assert k.value(THREADS) == [], "bad input must not start anything"
        assert k.value("__import__('nbgpu').session.shared_sampler() is None")

        assert k.run("%gpumon --source sim --interval 0.05 --refresh 0.25")["status"] == "ok"
        assert k.run("%gpumon --window 30")["status"] == "ok"  # a second panel, same sampler
        k.drain(1.0)  # no front end shows them: no refresh, no message, no panel timer
        assert not [u for u in k.updates if u.comm_id in k.lines_ids()]
        assert k.value(THREADS) == ["nbgpu-sampler"]
        assert show_in_kernel(k) == 2  # a view of each comes on screen
        assert _threads(k) == ["nbgpu-panels", "nbgpu-sampler"]  # one timer for all panels
        lines = k.lines_ids()
        assert lines, "the panel should have opened bqplot Lines models"

        start = len(k.updates)
        busy = "import time\nt0 = time.time()\nwhile time.time() - t0 < 4.0:\n    pass"
        assert k.run(busy)["status"] == "ok"
        during = k.updates[start:]
        data = [u for u in during if u.comm_id in lines and "y" in u.keys and "x" in u.keys]
        assert len(data) >= 8, f"only {len(data)} line updates during a 4-s busy cell"
        per_line: dict[str, list] = {}
        for u in data:
            per_line.setdefault(u.comm_id, []).append(u.buffers)
        changed = [cid for cid, bufs in per_line.items() if len(set(bufs)) >= 3]
        assert changed, "line data should keep changing during the busy cell"
        assert all(len(u.buffers) == 2 for u in data), "x and y must travel in one message"

        k.drain(2.0)
        by_widget: dict[str, list[float]] = {}
        for u in k.updates:
            by_widget.setdefault(u.comm_id, []).append(u.time)
        worst = max(by_widget, key=lambda cid: max_per_second(by_widget[cid]))
        rate = max_per_second(by_widget[worst])
        assert rate <= 4, f"a {k.models.get(worst)} was updated {rate} times in one second"

        n = len(k.outputs)
        assert k.run("%gpumon status")["status"] == "ok"
        status = k.stdout_since(n)
        assert "sampler: running" in status and "panels: 2 updating" in status
        for _ in range(2):  # running the same notebook cell again replaces its panel
            assert k.run("%gpumon --refresh 0.25", cell_id="cell-7")["status"] == "ok"
            show_in_kernel(k)
        assert _threads(k) == ["nbgpu-panels", "nbgpu-sampler"]

        assert k.run("%reload_ext nbgpu")["status"] == "ok"
        assert k.value(THREADS) == []
        assert k.run("%gpumon --source sim --refresh 0.25")["status"] == "ok"
        show_in_kernel(k)
        assert _threads(k) == ["nbgpu-panels", "nbgpu-sampler"]
        assert k.run("%unload_ext nbgpu")["status"] == "ok"
        assert k.value(THREADS) == []
        k.drain(0.5)
        quiet_from = len(k.updates)
        k.drain(1.5)
        late = [u for u in k.updates[quiet_from:] if u.comm_id in k.lines_ids()]
        assert not late, "a panel kept sending after %unload_ext"
        reply = k.run("%gpumon")
        assert reply["status"] == "error" and "UsageError" in reply["ename"]


def test_views_are_heard_while_a_cell_runs() -> None:
    """Shown, hidden and shown again during one busy cell: each takes effect at once (the
    views' messages go to a thread of their own, not behind the cell)."""
    with kernel_session() as k:
        assert k.run("%load_ext nbgpu")["status"] == "ok"
        assert k.run("%gpumon --source sim --refresh 0.25")["status"] == "ok"
        k.kc.execute("import time; time.sleep(12)")
        t0 = time.monotonic()
        k.drain(1.0)
        steps = []
        for visible in (True, False, True):
            show_in_kernel(k, visible)
            start = len(k.updates)
            k.drain(2.5)
            lines = [u for u in k.updates[start:] if u.comm_id in k.lines_ids()]
            steps.append(len(lines))
        assert time.monotonic() - t0 < 11, "the cell should still be running"
        assert steps[0] >= 1 and steps[1] <= 1 and steps[2] >= 1, steps  # (one may be on its way)
