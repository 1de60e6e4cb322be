"""A child found late is counted from when it was first seen, never above the machine (issue 33)."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from nbgpu.sources.host import HostSource, _proc_descendants

pytestmark = pytest.mark.skipif(_proc_descendants(os.getpid()) is None,
                                reason="this kernel has no /proc/<pid>/task/*/children")

# Burns about a second of CPU, then one more half second for each line it reads.
BURNER = ("import sys, time\n"
          "def burn(s):\n"
          "    t = time.process_time()\n"
          "    while time.process_time() - t < s: pass\n"
          "burn(1.0)\nprint('ready', flush=True)\n"
          "for _ in sys.stdin:\n    burn(0.5)\n    print('ready', flush=True)\n")

MAX_PCT = 100.0 * (os.cpu_count() or 1)


def _burner() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)


def test_a_child_found_late_is_counted_from_its_first_reading():
    host = HostSource(children_every_s=5.0)
    host.read(1000.0)  # the scan: no child yet
    child = _burner()
    try:
        assert child.stdout.readline() == "ready\n"  # a second of CPU before it is seen
        assert sum(psutil.Process(child.pid).cpu_times()[:2]) > 0.8
        host.read(1004.5)
        seen = host.read(1005.0)  # the rescan finds it: its past is a baseline, not a delta
        assert child.pid in host._children
        assert seen["proc_cpu_pct"] < 60.0, seen
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.stdout.readline() == "ready\n"  # half a second more, now counted
        later = host.read(1006.0)
        assert 40.0 <= later["proc_cpu_pct"] <= MAX_PCT, later
    finally:
        child.kill()
        child.wait(10)
        host.close()


def test_a_child_never_seen_and_reaped_is_never_above_every_core():
    host = HostSource(children_every_s=60.0)
    host.read(1000.0)
    child = _burner()
    assert child.stdout.readline() == "ready\n"
    child.stdin.close()
    child.wait(10)  # reaped: its whole second lands in this process's children times at once
    got = host.read(1000.001)  # a millisecond: a second of CPU would read 100000 %
    host.close()
    assert 0.0 <= got["proc_cpu_pct"] <= MAX_PCT, got
