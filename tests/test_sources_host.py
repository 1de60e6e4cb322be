"""Host readings: this process tree found from /proc's children lists, not a machine-wide scan."""

from __future__ import annotations

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
    assert host_module.meminfo_available_bytes(str(old_kernel)) is None
    assert host_module.meminfo_available_bytes(str(tmp_path / "absent")) is None
    monkeypatch.setattr(host_module, "MEMINFO_PATH", str(old_kernel))
    host = HostSource()
    assert not host._meminfo
    used = host.read(1000.0)["host_ram_used_bytes"]
    vm = psutil.virtual_memory()
    assert used == pytest.approx(vm.total - vm.available, abs=256 * 2**20)
