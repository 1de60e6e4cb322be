"""Helpers of the flight-recorder tests: a cache folder of their own, real kernels (one may be
put in a memory cgroup of its own), the ``nbgpu postmortem`` command.

Import explicitly (``from conftest_flight import ...``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest_profiles import KernelSession
from nbgpu import flight


@pytest.fixture(name="cache")
def cache_fixture(tmp_path, monkeypatch) -> Path:
    """The flight records' folder of this test (``$XDG_CACHE_HOME/nbgpu``, kernels included)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("NBGPU_FLIGHT_RECORDER", raising=False)
    return tmp_path / "nbgpu"


class Kernel:
    """A real kernel; ``text(code)`` runs a cell and returns what it printed."""

    def __init__(self, **start_kw) -> None:
        self.k = KernelSession(**start_kw)
        self.pid = self.k.km.provisioner.process.pid

    def text(self, code: str) -> str:
        reply, outputs = self.k.run(code)
        assert reply["status"] == "ok", outputs
        return "".join(o.get("text", "") for o in outputs if o["msg_type"] == "stream")

    def start(self, code: str) -> None:
        """Send ``code`` to run and return at once (it runs until the kernel dies)."""
        self.k.kc.execute(code)

    def wait_for_cell_record(self, cache: Path, timeout_s: float = 30.0) -> Path:
        """The kernel's ring once a record of the running cell is in it (a loaded machine is slow)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ring = next(cache.glob(f"flight-*-{self.pid}-*.ring"), None)
            got = flight.read_ring(ring) if ring is not None else None
            if got and got[1] and got[1][-1].get("cell"):
                return ring
            time.sleep(0.2)
        raise AssertionError(f"no record of a running cell from kernel {self.pid} in {timeout_s} s")

    def wait_dead(self, timeout_s: float = 60.0) -> None:
        """Block until the kernel's process is gone (it was killed or crashed)."""
        proc = self.k.km.provisioner.process
        proc.wait(timeout=timeout_s)

    def shut_down(self) -> None:
        """End the kernel as Jupyter's shutdown does (its flight record closes cleanly)."""
        try:
            self.k.kc.shutdown()
            self.k.km.finish_shutdown(waittime=20)
        finally:
            self.k.close()

    def close(self) -> None:
        """Stop the kernel now (a kill, unless it already ended)."""
        self.k.close()


def postmortem_cli(*args: str) -> subprocess.CompletedProcess:
    """``nbgpu postmortem ARGS`` in a fresh process, as a shell runs it."""
    return subprocess.run([sys.executable, "-m", "nbgpu.cli", "postmortem", *args],
                          capture_output=True, text=True, timeout=60)


def _own_memory_cgroup() -> tuple[Path, str] | None:
    """(folder, version) of this process's memory cgroup where a child can be made here."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hid, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            folder = Path("/sys/fs/cgroup/memory" + path.rstrip("/"))
            if (folder / "memory.limit_in_bytes").exists() and os.access(folder, os.W_OK):
                return folder, "v1"
        if hid == "0":
            folder = Path("/sys/fs/cgroup" + path.rstrip("/"))
            controls = folder / "cgroup.subtree_control"
            if (controls.exists() and "memory" in controls.read_text().split()
                    and os.access(folder, os.W_OK)):
                return folder, "v2"
    return None


@pytest.fixture(name="memory_cgroup")
def memory_cgroup_fixture() -> Iterator[tuple[Path, int]]:
    """A memory cgroup of 512 MiB (no swap), a child of this process's own: (folder, limit).

    Its processes are killed by the kernel's out-of-memory killer past the limit. Where no
    child cgroup can be made (a permission of the machine, not something a test can install)
    the test is skipped, and -ra says so.
    """
    own = _own_memory_cgroup()
    if own is None:
        pytest.skip("no writable memory cgroup here: the memory-killed kernel test cannot run")
    parent, version = own
    limit = 512 * 2**20
    folder = parent / f"nbgpu-test-{uuid.uuid4().hex[:8]}"
    folder.mkdir()
    try:
        if version == "v1":
            (folder / "memory.limit_in_bytes").write_text(str(limit))
            swap = folder / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(limit))
        else:
            (folder / "memory.max").write_text(str(limit))
            swap = folder / "memory.swap.max"
            if swap.exists():
                swap.write_text("0")
        yield folder, limit
    finally:
        for _ in range(50):  # the killed kernel leaves it a moment later
            try:
                folder.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def join_cgroup(folder: Path):
    """A ``preexec_fn`` that puts the new process in the cgroup ``folder``."""
    procs = str(folder / "cgroup.procs")

    def join() -> None:
        with open(procs, "w") as f:
            f.write(str(os.getpid()))

    return join
