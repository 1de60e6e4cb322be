"""Whose memory it is: this kernel highlighted, others aggregated, PID-namespace mismatch."""

from __future__ import annotations

import os
import types

from conftest_diagnostics import drive, sim_sampler
from nbgpu import SimulatedGPUs
from nbgpu.diagnostics import memory_owners
from nbgpu.diagnostics.owners import MISMATCH, OK, Match, attribute, match_hidden, users_line, who_uses
from nbgpu.sources.base import ProcessInfo
from nbgpu.sources.sim_faults import HOST_PID_OFFSET
from nbgpu.units import fmt_bytes

GONE_PID = 4_194_000  # above the usual pid_max: no process has it here


def test_this_kernel_is_found_on_each_gpu_with_its_memory():
    s, clock = sim_sampler("steady")
    drive(s, clock, 10)
    owners = memory_owners(s)
    assert owners.status == OK
    mine = [r for r in owners.rows if r["who"] == "this kernel"]
    assert [r["gpu"] for r in mine] == [0, 1]
    assert all(r["pid"] == os.getpid() and r["used_bytes"] > 1e9 for r in mine)
    df = owners.to_pandas()
    assert list(df["who"]) == ["this kernel", "this kernel"]
    html = owners._repr_html_()
    assert "this kernel" in str(owners) and "<table>" in html
    assert html.count("<td><b>this kernel</b></td>") == 2  # its own rows in bold, each closed


def test_other_processes_are_aggregated_without_names_unless_asked():
    sim = SimulatedGPUs(count=2)
    sim.add_process(0, 1, 10 * 2**30, name="init", user="root")
    sim.add_process(0, GONE_PID, 2 * 2**30, name="train.py", user="someone")
    s, clock = sim_sampler(source=sim)
    drive(s, clock, 3)
    owners = memory_owners(s)
    other = [r for r in owners.rows if r["who"] == "other processes"]
    assert len(other) == 1 and other[0]["gpu"] == 0
    assert other[0]["processes"] == 2 and other[0]["used_bytes"] == 12 * 2**30
    assert other[0]["pid"] is None and other[0]["command"] == "" and other[0]["user"] == ""
    shown = memory_owners(s, show_others=True)
    others = [r for r in shown.rows if r["who"] == "other processes"]
    assert sorted(r["pid"] for r in others) == [1, GONE_PID]


def test_pids_that_do_not_exist_here_are_a_namespace_mismatch_not_someone_else():
    s, clock = sim_sampler(source=SimulatedGPUs(count=2, hide_host_pids=True))
    drive(s, clock, 3)
    owners = memory_owners(s)
    assert owners.status == MISMATCH
    assert any("PID namespace" in n for n in owners.notes)
    assert {r["who"] for r in owners.rows} == {"unattributed processes"}
    assert not any(r["who"] in ("this kernel", "other processes") for r in owners.rows)


def test_framework_memory_without_our_pid_is_a_mismatch():
    procs = {0: [ProcessInfo(pid=1, used_bytes=8_000_000_000)]}
    status, why = attribute(procs, {os.getpid()}, framework_bytes=8e9, pid_exists=lambda p: True)
    assert status == MISMATCH and "7.5 GiB" in why
    status, _ = attribute(procs, {os.getpid()}, framework_bytes=0.0, pid_exists=lambda p: True)
    assert status == OK


def test_rules_fall_back_to_all_gpus_under_a_mismatch():
    s, clock = sim_sampler(source=SimulatedGPUs(count=4, scenario="imbalance", hide_host_pids=True))
    drive(s, clock, 33)
    ctx = s.diagnostics.context(s, clock.t)
    assert ctx.attribution == MISMATCH and ctx.gpus_in_use is None
    assert [a.gpu for a in s.diagnostics.alert_list()] == [3]


def _fake_torch(uuid: str, allocated: float, reserved: float, initialised: bool = True):
    calls = []

    def record(name, value):
        def fn(*a):
            calls.append(name)
            return value
        return fn

    props = types.SimpleNamespace(uuid=uuid)
    cuda = types.SimpleNamespace(
        is_initialized=record("is_initialized", initialised), device_count=record("device_count", 1),
        get_device_properties=record("props", props), memory_allocated=record("allocated", allocated),
        memory_reserved=record("reserved", reserved))
    return types.SimpleNamespace(cuda=cuda), calls


def test_torch_reserved_but_unallocated_memory_is_explained(monkeypatch):
    s, clock = sim_sampler("steady", count=1)
    drive(s, clock, 10)
    uuid = s.devices[0].uuid.removeprefix("GPU-")
    torch, _ = _fake_torch(uuid, allocated=10.2e9, reserved=14.3e9)
    monkeypatch.setitem(__import__("sys").modules, "torch", torch)
    owners = memory_owners(s)
    (note,) = [n for n in owners.notes if "torch" in n]
    assert note.startswith("GPU 0 (torch cuda:0): 9.5 GiB allocated, 13.3 GiB reserved, NVML")
    assert "3.8 GiB reserved but unallocated; `torch.cuda.empty_cache()` returns it" in note
    assert owners.status == OK


def test_torch_without_cuda_started_is_not_asked_anything_else(monkeypatch):
    s, clock = sim_sampler("steady", count=1)
    drive(s, clock, 3)
    torch, calls = _fake_torch("", 0, 0, initialised=False)
    monkeypatch.setitem(__import__("sys").modules, "torch", torch)
    owners = memory_owners(s)
    assert calls == ["is_initialized"]
    assert not any("torch" in n for n in owners.notes)


# -- a container's PID namespace: NVML's host PIDs matched to this kernel where evidence allows --
def _hidden_pid_sampler(extra_used: int | None = None):
    """2 simulated GPUs listing host PIDs, another process on GPU 1; (sampler, this process's
    listed entry on GPU 0). ``extra_used``: a second process on GPU 0 that much larger."""
    sim = SimulatedGPUs(count=2, hide_host_pids=True)
    sim.add_process(1, 55, 3 * 2**30)
    s, clock = sim_sampler(source=sim)
    drive(s, clock, 10)
    if extra_used is not None:
        (own,) = [p for p in s.processes()[0] if p.pid == os.getpid() + HOST_PID_OFFSET]
        sim.add_process(0, 77, own.used_bytes + extra_used)
        drive(s, clock, 10)
    (own,) = [p for p in s.processes()[0] if p.pid == os.getpid() + HOST_PID_OFFSET]
    return s, own


def test_in_a_pid_namespace_this_kernel_is_matched_by_its_allocator_and_context(monkeypatch):
    s, own = _hidden_pid_sampler()
    uuid = s.devices[0].uuid.removeprefix("GPU-")
    torch, _ = _fake_torch(uuid, allocated=own.used_bytes - 2**30, reserved=own.used_bytes - 2**29)
    monkeypatch.setitem(__import__("sys").modules, "torch", torch)
    owners = memory_owners(s)
    assert owners.status == MISMATCH
    mine = [r for r in owners.rows if r["who"] == "this kernel"]
    assert [r["gpu"] for r in mine] == [0, 1]  # the PID matched on GPU 0 is listed on GPU 1 too
    assert {r["pid"] for r in mine} == {own.pid} and mine[0]["used_bytes"] == own.used_bytes
    shown = f"matched by memory, {fmt_bytes(own.used_bytes)}"
    assert mine[0]["matched"] == shown
    assert f"GPU 0: this kernel ({shown}) (pid {own.pid})" in str(owners)
    assert [(r["who"], r["processes"]) for r in owners.rows if r["gpu"] == 1 and r["who"] != "this kernel"] \
        == [("unattributed processes", 1)]
    usage = who_uses(s)
    assert users_line(usage[0]) == f"this kernel {fmt_bytes(own.used_bytes)} (matched by memory)"
    assert users_line(usage[1]).endswith("3.0 GiB held; not attributed: this PID namespace hides the host "
                                         "PIDs NVML lists")


def test_two_processes_that_fit_the_figures_match_neither(monkeypatch):
    s, own = _hidden_pid_sampler(extra_used=2**27)  # another process 128 MiB larger: both fit
    uuid = s.devices[0].uuid.removeprefix("GPU-")
    torch, _ = _fake_torch(uuid, allocated=own.used_bytes - 2**30, reserved=own.used_bytes - 2**29)
    monkeypatch.setitem(__import__("sys").modules, "torch", torch)
    owners = memory_owners(s)
    assert not [r for r in owners.rows if r["who"] == "this kernel"]
    assert users_line(who_uses(s)[0]).endswith("this PID namespace hides the host PIDs NVML lists")


def _proc(root, pid, nspid: str, ns: str, cgroup: str) -> None:
    d = root / str(pid)
    (d / "ns").mkdir(parents=True)
    (d / "status").write_text(f"Name:\tpython\nNSpid:\t{nspid}\n")
    (d / "cgroup").write_text(cgroup)
    os.symlink(ns, d / "ns" / "pid")


def test_nspid_and_cgroup_in_a_visible_proc_match_host_pids(tmp_path):
    me, ours, theirs = os.getpid(), "pid:[4026532001]", "pid:[4026532999]"
    _proc(tmp_path, "self", str(me), ours, "0::/docker/abc\n")
    _proc(tmp_path, 910_001, f"910001\t{me}", ours, "0::/docker/abc\n")  # us, seen from the host
    _proc(tmp_path, 910_002, "910002\t57", ours, "0::/docker/abc\n")  # a neighbour in our container
    _proc(tmp_path, 910_003, f"910003\t{me}", theirs, "0::/docker/zzz\n")  # our number, elsewhere
    procs = {0: [ProcessInfo(pid=p, used_bytes=2**30) for p in (910_001, 910_002, 910_003, 910_004)]}
    found = match_hidden(procs, {me}, devices=[], frameworks=[], root=str(tmp_path))
    assert found[910_001] == Match(910_001, "this kernel", "NSpid", f"matched by NSpid: pid {me} here")
    assert (found[910_002].who, found[910_002].how) == ("this container", "cgroup")
    assert set(found) == {910_001, 910_002}
