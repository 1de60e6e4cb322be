"""The panel's process line walks this kernel's process tree only when NVML lists new PIDs."""

from __future__ import annotations

import os

from conftest_diagnostics import drive, sim_sampler
from nbgpu import SimulatedGPUs
from nbgpu.widgets import panel_draw
from nbgpu.widgets.panel_draw import ProcessesLine

GIB = 2**30
CHILD_PID = 4_194_101  # above the usual pid_max: a made-up worker of this kernel


def counting_walks(monkeypatch, extra: set[int]) -> list[int]:
    """Replace the tree walk with one that counts its calls and adds ``extra`` PIDs as children."""
    walks: list[int] = []

    def walk() -> set[int]:
        walks.append(1)
        return {os.getpid(), *extra}

    monkeypatch.setattr(panel_draw, "tree_pids", walk)
    return walks


def test_same_listed_pids_walk_the_tree_once(monkeypatch):
    walks = counting_walks(monkeypatch, set())
    s, clock = sim_sampler(source=SimulatedGPUs(count=2))
    line = ProcessesLine()
    for _ in range(6):
        drive(s, clock, 2.0)
        line.refresh(s, clock.t)
    assert len(walks) == 1
    assert "this kernel" in line.html
    s.stop()


def test_a_newly_listed_pid_is_looked_up_and_counted_as_the_kernels(monkeypatch):
    children: set[int] = set()
    walks = counting_walks(monkeypatch, children)
    sim = SimulatedGPUs(count=1)
    s, clock = sim_sampler(source=sim)
    line = ProcessesLine()
    drive(s, clock, 3.0)
    line.refresh(s, clock.t)
    sim.add_process(0, CHILD_PID, 2 * GIB)  # a DataLoader worker started after the first look
    children.add(CHILD_PID)
    drive(s, clock, 3.0)
    line.refresh(s, clock.t)
    assert len(walks) == 2
    assert "(2 processes)" in line.html or "(2)" in line.html
    s.stop()
