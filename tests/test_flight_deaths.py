"""Real kernels dying as kernels do: killed for memory by the kernel's OOM killer, a segfault,
two kernels dying at once; the next ``%load_ext nbgpu`` says each once, with its cause."""

from __future__ import annotations

import os
import re
import signal

import pytest

from conftest_flight import (  # noqa: F401 - fixtures
    Kernel,
    cache_fixture,
    join_cgroup,
    memory_cgroup_fixture,
    postmortem_cli,
)

pytestmark = pytest.mark.kernel

GROW = """\
import numpy as np, time
kept = []
while True:  # 4 MiB more every 50 ms, every page touched: a record falls in the last 20 %
    kept.append(np.ones(2**19))
    time.sleep(0.05)
"""


def test_memory_killed_kernel_is_named_as_killed_for_memory_with_figures(cache, memory_cgroup):
    folder, limit = memory_cgroup
    k = Kernel(preexec_fn=join_cgroup(folder))
    try:
        k.text("%load_ext nbgpu")
        pid = k.pid
        k.start(GROW)
        k.wait_dead()
        assert k.k.km.provisioner.process.returncode == -signal.SIGKILL  # the OOM killer's signal
    finally:
        k.close()
    reporter = Kernel()
    try:
        out = reporter.text("%load_ext nbgpu")
    finally:
        reporter.close()
    assert f"(pid {pid}) died" in out and "`import numpy as np, time`" in out, out
    said = re.search(r"(likely|confirmed) killed by the out-of-memory killer: cgroup memory (\d+) % "
                     r"\((0\.\d\d) of (0\.50) GiB\)", out)
    assert said and float(said.group(4)) == limit / 2**30 and int(said.group(2)) >= 80, out
    assert re.search(r"this kernel \d+\.\d MiB, rising \d+\.\d MiB/s", out), out


def test_two_kernels_dying_at_once_a_segfault_and_a_kill_are_each_reported_once(cache):
    crashing, killed = Kernel(), Kernel()
    try:
        for k in (crashing, killed):
            k.text("%load_ext nbgpu\nimport ctypes, time")
        killed.start("for i in range(1000): time.sleep(0.1)")
        crashing.start("time.sleep(1.5)\nctypes.string_at(0)")
        rings = {crashing.wait_for_cell_record(cache), killed.wait_for_cell_record(cache)}
        assert len(rings) == 2  # each kernel its own ring
        crashing.wait_dead()
        assert crashing.k.km.provisioner.process.returncode == -signal.SIGSEGV
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait_dead()
    finally:
        crashing.close()
        killed.close()
    reporter = Kernel()
    try:
        out = reporter.text("%load_ext nbgpu")
        assert "died" not in reporter.text("%unload_ext nbgpu\n%load_ext nbgpu")
    finally:
        reporter.shut_down()
    further = Kernel()
    try:
        assert "died" not in further.text("%load_ext nbgpu")
    finally:
        further.close()
    lines = [ln for ln in out.splitlines() if "died at about" in ln]
    assert len(lines) == 2, out
    crash = next(ln for ln in lines if f"(pid {crashing.pid})" in ln)
    assert "`time.sleep(1.5)`" in crash
    assert "no resource was near a limit: a crash inside native code is likely" in crash
    assert any(f"(pid {killed.pid})" in ln for ln in lines)
    cli = postmortem_cli("--all")  # the shell still lists both (shown or not)
    assert cli.returncode == 0 and all(f"(pid {k.pid}) died" in cli.stdout for k in (crashing, killed)), cli


def test_a_kernel_whose_disk_cannot_take_the_ring_says_so_once_and_works_on(cache, tmp_path):
    """A real refusal from the OS: files of this kernel may not pass 64 KiB (RLIMIT_FSIZE, the
    way a full disk refuses the ring's blocks), so the ring cannot be made."""
    import resource

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    env = dict(os.environ, IPYTHONDIR=str(tmp_path / "ipython"))  # its history stays small
    k = Kernel(preexec_fn=small_files, env=env)
    try:
        reply, outputs = k.k.run("%load_ext nbgpu")
        assert reply["status"] == "ok", outputs
        said = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
        assert said.count("cannot keep a flight record") == 1, outputs
        assert "everything else works" in said
        reply, outputs = k.k.run("%unload_ext nbgpu\n%load_ext nbgpu\nimport nbgpu\n"
                                 "print(nbgpu.Sampler('sim', diagnostics=False).start().stop() is None)")
        assert reply["status"] == "ok", outputs
        text = "".join(o.get("text", "") for o in outputs)
        assert "cannot keep a flight record" not in text and "True" in text, outputs
    finally:
        k.close()
    assert not list(cache.glob("flight-*.ring"))  # no half-made ring left behind


def test_a_kernel_killed_after_a_gpu_fault_is_reported_with_the_xid(cache):
    """The whole XID path in a real kernel: the simulated GPUs' event set, the sampler's
    tick, the store, the ring; then the next kernel's ``%load_ext`` names the fault."""
    k = Kernel()
    try:
        k.text("%load_ext nbgpu\nimport nbgpu, time\nfrom nbgpu import session\n"
               "sim = nbgpu.SimulatedGPUs(count=2)\ns = session.ensure_sampler(sim, 0.1)")
        k.text("sim.inject_xid(1, 79)\ndeadline = time.monotonic() + 30\n"
               "while not s.status().xids and time.monotonic() < deadline: time.sleep(0.05)")
        k.start("for i in range(1000): time.sleep(0.1)")
        ring = k.wait_for_cell_record(cache)
        os.kill(k.pid, signal.SIGKILL)
        k.wait_dead()
    finally:
        k.close()
    from nbgpu import flight

    assert any(r.get("xid") for r in flight.read_ring(ring)[1])
    reporter = Kernel()
    try:
        out = reporter.text("%load_ext nbgpu")
    finally:
        reporter.close()
    assert f"(pid {k.pid}) died" in out and "In [3] `for i in range(1000): time.sleep(0.1)`" in out, out
    assert "GPU 1 reported XID 79 (GPU has fallen off the bus)" in out, out
    assert "a GPU fault is the likely cause" in out, out
