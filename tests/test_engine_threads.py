"""The sampler's threads: requests never lost, bounded stop, safe snapshots, one thread at most."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import nbgpu
from nbgpu import session
from nbgpu.config import check_interval
from nbgpu.errors import BadArgumentError, SamplerStateError
from nbgpu.sampler import Sampler
from nbgpu.sampler_thread import _stop_all_at_exit
from nbgpu.sources.simulated import SimulatedGPUs

ENGINE_FILES = ("nbgpu/sampler.py", "nbgpu/schedule.py")


def sampler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nbgpu-sampler" and t.is_alive()]


def procs_reads(sim: SimulatedGPUs) -> int:
    return sim.calls["nvmlDeviceGetComputeRunningProcesses"]


def run_with_request_at_line(stepped, k: int) -> tuple[bool, int]:
    """Step once while another thread calls ``request("procs")`` at the k-th engine line.

    Returns (whether that line was reached, how many process reads the request caused
    over that step and the next one, which begins after the request returned). The other
    thread waits on the sampler's own locks exactly as a real caller would; the step goes
    on after 20 ms if it is blocked.
    """
    clock = stepped.new_clock()
    sim = SimulatedGPUs(count=1, clock=clock)
    s = Sampler(sim, interval=0.5, procs_every_s=3600, host=False, diagnostics=False, clock=clock)
    s.step(clock.t)  # first step: every costly read is due once
    before = procs_reads(sim)
    seen = [0]
    reached = [False]
    callers: list[threading.Thread] = []

    def tracer(frame, event, arg):
        if not frame.f_code.co_filename.endswith(ENGINE_FILES):
            return None
        if event == "line":
            seen[0] += 1
            if seen[0] == k:
                reached[0] = True
                caller = threading.Thread(target=s.request, args=("procs",))
                callers.append(caller)
                caller.start()
                caller.join(0.02)
        return tracer

    clock.t += 0.5
    sys.settrace(tracer)
    try:
        s.step(clock.t)
    finally:
        sys.settrace(None)
    for caller in callers:  # the request has returned before the next step begins
        caller.join()
    clock.t += 0.5
    s.step(clock.t)
    s.stop()
    return reached[0], procs_reads(sim) - before


def test_a_request_landing_at_any_line_of_a_step_is_never_lost(stepped):
    k = 1
    while True:
        reached, reads = run_with_request_at_line(stepped, k)
        if not reached:
            break
        assert reads >= 1, f"request at engine line {k} of the step was lost"
        k += 1
    assert k > 20  # the step ran through a real number of engine lines


def test_stop_returns_within_a_second_while_a_read_hangs_and_the_thread_closes_the_source():
    sim = SimulatedGPUs(count=1)
    s = Sampler(sim, interval=0.05, host=False, diagnostics=False).start()
    sim.inject_hang("nvmlDeviceGetMemoryInfo", 30.0)
    assert sim.wait_hanging(5.0)
    memory_reads = sim.calls["nvmlDeviceGetMemoryInfo"]
    t0 = time.monotonic()
    s.stop()
    assert time.monotonic() - t0 < 1.5
    assert s.status().state == "stopping"
    assert not s.running
    assert sim.initialised  # not closed under the hanging read
    with pytest.raises(SamplerStateError, match="closed"):
        s.start()
    sim.release_hangs()
    deadline = time.monotonic() + 5
    while s.status().state != "closed" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.status().state == "closed"
    assert not sim.initialised
    assert not sampler_threads()
    assert sim.calls["nvmlDeviceGetMemoryInfo"] == memory_reads  # no last read after a hang


def test_starting_while_still_stopping_says_why_in_one_line():
    sim = SimulatedGPUs(count=1)
    s = Sampler(sim, interval=0.05, host=False, diagnostics=False).start()
    sim.inject_hang("nvmlDeviceGetMemoryInfo", 30.0)
    assert sim.wait_hanging(5.0)
    s.stop(close=False, timeout_s=0.05)
    with pytest.raises(SamplerStateError, match="still stopping") as err:
        s.start()
    assert "\n" not in str(err.value)
    sim.release_hangs()
    deadline = time.monotonic() + 5
    while s.status().state != "stopped" and time.monotonic() < deadline:
        time.sleep(0.01)
    s.start()
    assert s.status().state == "running"
    s.stop()
    assert s.status().state == "closed"


def test_lost_and_processes_are_snapshots_safe_to_iterate_while_the_sampler_writes(stepped):
    clock = stepped.new_clock()
    sim = SimulatedGPUs(count=3, clock=clock)
    s = Sampler(sim, interval=0.5, host=False, diagnostics=False, clock=clock)
    s.step(clock.t)
    sim.lose_gpu(0)
    clock.t += 0.5
    s.step(clock.t)
    lost = s.lost
    procs = s.processes()
    it_lost, it_procs = iter(lost), iter(procs)
    next(it_lost), next(it_procs)
    sim.lose_gpu(1)
    sim.add_process(2, pid=4242, used_bytes=10**9)
    for _ in range(6):
        clock.t += 0.5
        s.step(clock.t)
    list(it_lost), list(it_procs)  # a live dict would raise "changed size during iteration"
    assert set(s.lost) == {0, 1} and set(lost) == {0}
    assert 4242 in [p.pid for p in s.processes()[2]]
    s.stop()


def test_eight_threads_starting_at_once_start_exactly_one_thread():
    for _ in range(20):
        s = Sampler(SimulatedGPUs(count=1), interval=0.05, host=False, diagnostics=False)
        barrier = threading.Barrier(8)
        errors = []

        def go(s=s, barrier=barrier, errors=errors):
            barrier.wait()
            try:
                s.start()
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=go) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        assert len(sampler_threads()) == 1
        s.stop()
        assert not sampler_threads()


def test_start_and_stop_toggled_from_threads_never_raise_and_leave_one_thread_at_most():
    s = Sampler(SimulatedGPUs(count=1), interval=0.05, host=False, diagnostics=False)
    errors = []
    counts = []

    def toggle(i: int) -> None:
        try:
            for _ in range(15):
                if i % 2:
                    s.start()
                else:
                    s.stop(close=False)
                counts.append(len(sampler_threads()))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=toggle, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert max(counts) <= 1
    s.stop()
    assert not sampler_threads() and s.status().state == "closed"


def test_a_paused_sampler_starts_again_and_a_closed_one_says_why():
    s = Sampler(SimulatedGPUs(count=1), interval=0.05, host=False, diagnostics=False).start()
    s.stop(close=False)
    assert s.status().state == "stopped"
    s.start()
    assert s.running
    s.stop()
    with pytest.raises(SamplerStateError, match=r"closed.*create a new Sampler") as err:
        s.start()
    assert not isinstance(err.value, BadArgumentError)
    with pytest.raises(SamplerStateError):
        s.step(0.0)


@pytest.mark.parametrize("bounds", [{"full_res_s": -1}, {"history_s": -5}, {"bucket_s": 0},
                                    {"full_res_s": float("nan")}, {"bucket_s": "10"}])
def test_bad_store_bounds_are_rejected_before_nvml_opens(bounds):
    sim = SimulatedGPUs()
    with pytest.raises(BadArgumentError, match=next(iter(bounds))):
        Sampler(sim, **bounds)
    assert not sim.initialised


def test_interval_has_a_10_ms_floor_with_a_clear_message():
    assert check_interval(0.01) == 0.01
    for bad in (1e-9, 0.005):
        with pytest.raises(BadArgumentError, match=r"from 0.01 to 3600.*below 10 ms") as err:
            check_interval(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(BadArgumentError, match="interval"):
        nbgpu.Sampler(SimulatedGPUs(), interval=1e-9)


def test_on_replace_returns_a_way_to_unregister():
    calls = []
    remove = session.on_replace(lambda old, new: calls.append(new))
    try:
        first = session.ensure_sampler("sim", 0.2)
        second = session.ensure_sampler("sim", 0.3)
        assert calls == [first, second]
        remove()
        session.ensure_sampler("sim", 0.4)
        assert calls == [first, second]
    finally:
        remove()
        session.reset()
    assert not sampler_threads()


def test_session_reset_and_interpreter_exit_leave_no_thread_and_no_nvml_handle():
    sim = SimulatedGPUs(count=1)
    shared = session.ensure_sampler(sim, 0.1)
    session.reset()
    assert not sampler_threads() and not sim.initialised and shared.status().state == "closed"
    other = SimulatedGPUs(count=1)
    Sampler(other, interval=0.05, host=False, diagnostics=False).start()
    _stop_all_at_exit()  # what atexit runs
    assert not sampler_threads() and not other.initialised


def test_a_request_landing_while_the_thread_reads_the_clock_is_served_after_it():
    # A capture ends (its end time read) and asks for an edge while the thread is between
    # reading the clock and taking the pending requests. Served in that step, the edge would
    # be stamped before the block's end and the capture would wait for a reading it never gets.
    from nbgpu.profiles.capture import wait_for_edge

    ended: list[float] = []
    block_ended = threading.Event()

    class Clock:
        """1 ms further at each call; the sampler thread's first reading lets a block end."""

        def __init__(self) -> None:
            self.t, self.armed = 1_800_000_000.0, False

        def __call__(self) -> float:
            self.t += 1e-3
            now = self.t
            if self.armed and threading.current_thread().name == "nbgpu-sampler":
                self.armed = False
                ended.append(now + 1e-3)  # the block's end, read just after this
                self.t += 1e-3
                s.request("edge")
                block_ended.set()
            return now

    clock = Clock()
    sim = SimulatedGPUs(count=1, clock=clock)
    s = Sampler(sim, interval=5.0, host=False, diagnostics=False, clock=clock)
    s.step(clock())
    clock.armed = True
    s.start()
    try:
        assert block_ended.wait(5.0)
        assert wait_for_edge(s, ended[0], timeout_s=3.0)  # the next step served it
    finally:
        s.stop()
    t, _ = s.timeline.series(0, "mem_used_bytes")
    assert (t >= ended[0]).any()
