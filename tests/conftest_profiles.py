"""Fixtures of the profiles area: a running simulated sampler, clean profile state, a kernel.

Import explicitly (``from conftest_profiles import ...``).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator

import pytest

from nbgpu import Sampler, SimulatedGPUs, session
from nbgpu.profiles import cells, history
from nbgpu.sampler_thread import running_samplers


@pytest.fixture(name="clean_profiles")
def clean_profiles_fixture() -> Iterator[None]:
    """No cell mode, no history, no shared sampler before and after; stray samplers stopped."""
    history.clear()
    session.reset()
    yield
    if cells._mode is not None:
        cells.disable_cell_mode(cells._mode.shell)
    history.clear()
    session.reset()
    for s in running_samplers():
        s.stop()


@pytest.fixture(name="sim_sampler")
def sim_sampler_fixture(clean_profiles) -> Iterator[Sampler]:
    """A running sampler over 2 simulated GPUs, ticking every 0.1 s, with a second of data."""
    s = Sampler(SimulatedGPUs(count=2, seed=1), interval=0.1).start()
    time.sleep(1.0)
    yield s
    s.stop()


class KernelSession:
    """A real IPython kernel and a client that collects what each execution displays."""

    def __init__(self, **start_kw) -> None:
        """``start_kw`` go to the kernel's process (``preexec_fn``, ``env``)."""
        from jupyter_client.manager import start_new_kernel

        self.km, self.kc = start_new_kernel(kernel_name="python3", **start_kw)

    def run(self, code: str, timeout: float = 60.0, cell_id: str | None = None) -> tuple[dict, list[dict]]:
        """Execute ``code``; returns (execute_reply content, iopub output messages' contents)."""
        kc = self.kc
        metadata = {"cellId": cell_id} if cell_id else {}
        msg = kc.session.msg("execute_request", {"code": code, "silent": False, "store_history": True,
                                                 "user_expressions": {}, "allow_stdin": False,
                                                 "stop_on_error": False}, metadata=metadata)
        kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        outputs: list[dict] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                m = kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty as exc:
                raise TimeoutError(f"no idle status for {code[:40]!r} within {timeout}s") from exc
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            kind = m["msg_type"]
            if kind == "status" and m["content"]["execution_state"] == "idle":
                break
            if kind in ("display_data", "execute_result", "stream", "error"):
                outputs.append(dict(m["content"], msg_type=kind))
        reply = kc.get_shell_msg(timeout=timeout)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=timeout)
        return reply["content"], outputs

    def value(self, expr: str):
        """The value of a Python expression in the kernel, through JSON."""
        import json

        reply, outputs = self.run(f"import json as _j; print(_j.dumps({expr}, default=str))")
        assert reply["status"] == "ok", (reply["status"], outputs)
        text = "".join(o.get("text", "") for o in outputs if o["msg_type"] == "stream")
        return json.loads(text)

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module", name="kernel")
def kernel_fixture() -> Iterator[KernelSession]:
    k = KernelSession()
    try:
        yield k
    finally:
        k.close()


@pytest.fixture(scope="module", name="loaded")
def loaded_fixture(kernel: KernelSession) -> KernelSession:
    """A kernel with nbgpu loaded on simulated GPUs from the start, whatever ran before."""
    reply, outputs = kernel.run("%load_ext nbgpu\nimport nbgpu, time\n"
                                "from nbgpu import session\nsession.ensure_sampler('sim', 0.1)")
    assert reply["status"] == "ok", outputs
    return kernel
