"""Host readings: this process tree found from /proc's children lists, not a machine-wide scan."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from nbgpu.diagnostics.owners import tree_pids
from nbgpu.sources import host as host_module
from nbgpu.sources.host import HostSource, _proc_descendants, descendant_pids

pytestmark = pytest.mark.skipif(_proc_descendants(os.getpid()) is None,
                                reason="this kernel has no /proc/<pid>/task/*/children")

# A child that starts a grandchild, both sleeping until killed.
GRANDPARENT = ("import subprocess, sys, time; "
               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
               "time.sleep(60)")


@pytest.fixture
def family():
    child = subprocess.Popen([sys.executable, "-c", GRANDPARENT])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            kids = psutil.Process(child.pid).children()
        except psutil.Error:
            kids = []
        if kids:
            break
        time.sleep(0.05)
    grandchild = kids[0].pid
    yield child.pid, grandchild
    for pid in (grandchild, child.pid):
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    child.wait(10)


def test_descendants_are_the_whole_tree(family):
    child, grandchild = family
    assert {child, grandchild} <= descendant_pids(os.getpid())
    assert descendant_pids(os.getpid()) == {p.pid for p in psutil.Process().children(recursive=True)}


def test_host_and_diagnostics_find_the_tree_without_scanning_every_process(family, monkeypatch):
    # psutil's children() reads every process of the machine (4 ms a scan on a GPU host).
    def machine_wide_scan(*_a, **_k):
        raise AssertionError("scanned every process")

    monkeypatch.setattr(psutil.Process, "children", machine_wide_scan)
    child, grandchild = family
    assert {os.getpid(), child, grandchild} <= tree_pids()
    host = HostSource()
    values = host.read(time.time())
    assert set(host._children) >= {child, grandchild}
    assert values["proc_rss_bytes"] > psutil.Process().memory_info().rss  # children counted


def test_a_child_forked_by_another_thread_is_in_the_tree():
    # Each thread has its own children list: a worker started from a thread is listed there.
    started: list[subprocess.Popen] = []
    thread = threading.Thread(target=lambda: started.append(
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])))
    thread.start()
    thread.join()
    try:
        assert started[0].pid in descendant_pids(os.getpid())
    finally:
        started[0].kill()
        started[0].wait(10)


def test_process_cpu_share_follows_the_cpu_this_process_spent():
    host = HostSource()
    before = psutil.Process().cpu_times()
    host.read(1000.0)
    end = time.thread_time() + 0.3
    while time.thread_time() < end:  # burn 0.3 s of CPU in this thread
        pass
    values = host.read(1001.0)  # the reads are one (fake) second apart
    after = psutil.Process().cpu_times()
    spent_s = (after.user + after.system) - (before.user + before.system)
    assert values["proc_cpu_pct"] == pytest.approx(100.0 * spent_s, abs=3.0)
    assert values["proc_cpu_pct"] >= 25.0


def test_ram_in_use_is_total_less_what_the_kernel_says_is_available():
    host = HostSource()
    used = host.read(1000.0)["host_ram_used_bytes"]
    vm = psutil.virtual_memory()
    assert used == pytest.approx(vm.total - vm.available, abs=256 * 2**20)  # moved meanwhile
    assert 0 < used < vm.total


def test_ram_comes_from_psutil_where_meminfo_has_no_available_line(tmp_path, monkeypatch):
    old_kernel = tmp_path / "meminfo"
    old_kernel.write_text("MemTotal:       16000000 kB\nMemFree:         8000000 kB\n")
    assert host_module._meminfo_available(host_module.ProcFile(str(old_kernel)).read()) is None
    assert host_module.ProcFile(str(tmp_path / "absent")).read() is None
    monkeypatch.setattr(host_module, "MEMINFO_PATH", str(old_kernel))
    host = HostSource()
    used = host.read(1000.0)["host_ram_used_bytes"]
    vm = psutil.virtual_memory()
    assert used == pytest.approx(vm.total - vm.available, abs=256 * 2**20)


class _ScriptedCpu:
    """The machine's CPU times from a file the test rewrites, for /proc/stat readers and psutil alike.

    ``at(busy_s, idle_s)`` writes a /proc/stat whose first line says so; psutil's own
    ``cpu_times`` is pointed at the same file, so whichever way the host source reads the
    machine's CPU, it reads these times.
    """

    def __init__(self, tmp_path, monkeypatch) -> None:
        self.path = tmp_path / "stat"
        self.tick = os.sysconf("SC_CLK_TCK")
        monkeypatch.setattr(host_module, "PROC_STAT_PATH", str(self.path), raising=False)
        fields = psutil._psplatform.scputimes._fields

        def cpu_times():
            values = [float(x) / self.tick for x in self.path.read_text().split()[1:len(fields) + 1]]
            return psutil._psplatform.scputimes(*values)

        monkeypatch.setattr(psutil._psplatform, "cpu_times", cpu_times)

    def at(self, busy_s: float, idle_s: float) -> None:
        # user nice system idle iowait irq softirq steal guest guest_nice, in clock ticks
        ticks = [round(busy_s * self.tick), 0, 0, round(idle_s * self.tick), 0, 0, 0, 0, 0, 0]
        self.path.write_text("cpu  " + " ".join(map(str, ticks)) + "\ncpu0 0 0 0 0 0 0 0 0 0 0\n")


def test_the_first_host_cpu_reading_on_the_sampler_thread_is_measured_not_zero(tmp_path, monkeypatch):
    # The source is made on one thread and read on the sampler's: its first reading covers
    # the time since it was made (here 3 s busy of 4), not 0 % from a counter primed elsewhere.
    cpu = _ScriptedCpu(tmp_path, monkeypatch)
    cpu.at(busy_s=100.0, idle_s=100.0)
    host = HostSource()
    cpu.at(busy_s=103.0, idle_s=101.0)
    got: list[dict] = []
    reader = threading.Thread(target=lambda: got.append(host.read(1000.0)))
    reader.start()
    reader.join()
    assert got[0]["host_cpu_pct"] == pytest.approx(75.0, abs=0.1)


def test_host_reads_leave_psutils_cpu_percent_of_the_users_thread_alone(tmp_path, monkeypatch):
    # A user's psutil.cpu_percent() measures from their own last call: making a host source
    # (a Sampler) or reading it on the same thread (Sampler.step) must not move that start.
    cpu = _ScriptedCpu(tmp_path, monkeypatch)
    cpu.at(busy_s=10.0, idle_s=10.0)
    psutil.cpu_percent(None)  # the user's start
    cpu.at(busy_s=20.0, idle_s=10.0)
    host = HostSource()
    cpu.at(busy_s=20.0, idle_s=20.0)
    host.read(1000.0)
    cpu.at(busy_s=20.0, idle_s=30.0)
    assert psutil.cpu_percent(None) == pytest.approx(100.0 * 10 / 30, abs=0.1)  # since the user's start


def test_host_cpu_percent_follows_its_own_last_reading(tmp_path, monkeypatch):
    cpu = _ScriptedCpu(tmp_path, monkeypatch)
    cpu.at(busy_s=0.0, idle_s=0.0)
    host = HostSource()
    cpu.at(busy_s=1.0, idle_s=3.0)
    assert host.read(1.0)["host_cpu_pct"] == pytest.approx(25.0, abs=0.1)
    psutil.cpu_percent(None)  # someone else's call in between changes nothing here
    cpu.at(busy_s=3.0, idle_s=3.0)
    assert host.read(2.0)["host_cpu_pct"] == pytest.approx(100.0, abs=0.1)
    assert math.isnan(host.read(3.0)["host_cpu_pct"])  # no CPU time passed: not measured, not 0


def _open_proc_files() -> set[str]:
    """What this process's descriptors that point into /proc point at."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/proc/"):
            out.add(target)
    return out


def test_a_stopped_sampler_leaves_no_proc_file_open():
    import nbgpu

    before = _open_proc_files()
    sampler = nbgpu.Sampler(source=nbgpu.SimulatedGPUs(count=1, seed=0), clock=lambda: 1000.0)
    sampler.step(1000.0)
    kept = _open_proc_files() - before
    assert any(p.endswith("/statm") for p in kept) and "/proc/stat" in kept  # kept between ticks
    sampler.stop()
    assert _open_proc_files() - before == set()


def test_an_ended_childs_files_are_closed_and_its_figures_leave_the_tree():
    before = _open_proc_files()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host = HostSource(children_every_s=0.0)
        host.read(1000.0)
        assert set(host._children) == {child.pid}
        assert any(p.startswith(f"/proc/{child.pid}/") for p in _open_proc_files())
    finally:
        child.kill()
        child.wait(10)
    host.read(1001.0)
    assert host._children == {}
    assert not any(p.startswith(f"/proc/{child.pid}/") for p in _open_proc_files())
    host.close()
    assert _open_proc_files() - before == set()


def test_without_proc_files_psutil_answers_every_figure(tmp_path, monkeypatch):
    # Another system (no /proc/stat, /proc/self/statm, /proc/meminfo): the same figures
    # through psutil, the machine's CPU still from the source's own last reading.
    for name in ("PROC_STAT_PATH", "SELF_STATM_PATH", "MEMINFO_PATH"):
        monkeypatch.setattr(host_module, name, str(tmp_path / "absent"))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        host = HostSource(children_every_s=0.0)
        assert not host._procfs
        first = host.read(1000.0)
        end = time.thread_time() + 0.1
        while time.thread_time() < end:
            pass
        values = host.read(1001.0)
        assert set(host._children) == {child.pid} and host._children[child.pid].process is not None
    finally:
        child.kill()
        child.wait(10)
    me = psutil.Process().memory_info().rss
    assert values["proc_rss_bytes"] > me  # this process and its child
    assert 0.0 < values["host_cpu_pct"] <= 100.0  # 0.1 s of this thread spinning between the reads
    assert values["proc_cpu_pct"] >= 5.0 and math.isnan(first["proc_cpu_pct"])
    vm = psutil.virtual_memory()
    assert values["host_ram_used_bytes"] == pytest.approx(vm.total - vm.available, abs=256 * 2**20)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_process_reads_its_own_files_not_its_parents():
    # The kept /proc/self files name the process that opened them: a forked child (a
    # DataLoader worker made by fork, say) that reads the source opens its own.
    import warnings

    host = HostSource()
    host.read(1000.0)
    ballast = bytearray(64 * 2**20)  # the parent's RSS, well above the child's own
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads running
        pid = os.fork()
    if pid == 0:  # the child: drop the ballast, then report its RSS as the source reads it
        try:
            del ballast
            import gc

            gc.collect()
            seen = host._tree_cpu_seconds(1001.0)[1]
            os.write(write_end, f"{seen} {psutil.Process().memory_info().rss}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    got, own = (float(x) for x in os.read(read_end, 256).split())
    os.close(read_end)
    os.waitpid(pid, 0)
    assert got == pytest.approx(own, rel=0.2)  # the child's RSS, not the parent's
    assert host.read(1002.0)["proc_rss_bytes"] >= len(ballast)  # the parent's files still its own
