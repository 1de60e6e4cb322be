"""Who is using the GPU: this kernel and its children, this user elsewhere, others aggregated."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys

from conftest_diagnostics import drive, sim_sampler
from nbgpu import SimulatedGPUs
from nbgpu.diagnostics.owners import users_line, who_uses
from nbgpu.widgets.monitor import GPUMonitor
from nbgpu.widgets.registry import descendants

GIB = 2**30
OTHER_PID = 4_194_001  # above the usual pid_max: a made-up process of someone else


def fleet_of_processes(**kw) -> SimulatedGPUs:
    sim = SimulatedGPUs(count=2, **kw)
    sim.add_process(0, OTHER_PID, 12 * GIB, name="secret_job.py", user="alice")
    sim.add_process(0, OTHER_PID + 1, 3 * GIB, name="other.py", user="bob")
    sim.add_process(1, OTHER_PID + 2, 2 * GIB, name="mine_elsewhere.py", user=getpass.getuser())
    return sim


def test_kernel_children_user_and_others_are_told_apart():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        sim = fleet_of_processes()
        sim.add_process(0, child.pid, 2 * GIB)  # a DataLoader-like worker of this kernel
        s, clock = sim_sampler(source=sim)
        drive(s, clock, 3)
        usage = who_uses(s, pid_exists=lambda pid: pid in (os.getpid(), child.pid))
        listed = {g: {p.pid: p.used_bytes for p in ps} for g, ps in s.processes().items()}
        mine0 = listed[0][os.getpid()] + listed[0][child.pid]
        assert usage[0].kernel_bytes == mine0 and usage[0].kernel_processes == 2
        assert usage[0].others_bytes == 15 * GIB and usage[0].others_processes == 2
        assert usage[1].user_bytes == 2 * GIB and usage[1].user_processes == 1
        assert usage[1].kernel_bytes == listed[1][os.getpid()]
        line = users_line(usage[0])
        assert "this kernel" in line and "others 15.0 GiB (2 processes)" in line
        assert "alice" not in line and "secret_job" not in line  # other users stay unnamed
        assert "you elsewhere 2.0 GiB" in users_line(usage[1])
    finally:
        child.kill()
        child.wait()


def test_a_pid_namespace_that_hides_host_pids_is_said_not_guessed():
    s, clock = sim_sampler(source=fleet_of_processes(hide_host_pids=True))
    drive(s, clock, 3)
    usage = who_uses(s)
    assert all(not u.attributed and u.kernel_processes == 0 for u in usage.values())
    assert usage[0].unattributed_processes == 3
    line = users_line(usage[0])
    assert "PID namespace" in line and "this kernel" not in line


def test_the_panel_shows_the_line_per_gpu_and_can_leave_it_out():
    s, clock = sim_sampler(source=fleet_of_processes())
    drive(s, clock, 3)
    mon = GPUMonitor(sampler=s, start=False)
    off = GPUMonitor(sampler=s, start=False, processes=False)
    try:
        mon.refresh(force=True, now=clock.t)
        off.refresh(force=True, now=clock.t)
        line = 'class="nbgpu-m nbgpu-procs"'
        shown = [w for w in descendants(mon) if line in str(w.get_state().get("value", ""))]
        assert len(shown) == 1
        value = shown[0].get_state()["value"].split(line)[1]
        assert "<b>GPU 0</b>" in value and "<b>GPU 1</b>" in value and "others 15.0 GiB" in value
        assert not any(line in str(w.get_state().get("value", "")) for w in descendants(off))
    finally:
        mon.close()
        off.close()
        s.stop()


def test_no_process_lists_hide_the_line():
    s, clock = sim_sampler(source=SimulatedGPUs(count=1))
    drive(s, clock, 3)
    assert set(who_uses(s)) == {0}  # the simulated model's own process is listed
    s.processes = dict  # a source without process lists (Prometheus) gives {}
    assert who_uses(s) == {}
    s.stop()
