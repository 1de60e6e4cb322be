"""The flight recorder: a crash-safe ring per kernel, and the post-mortem of a killed kernel."""

from __future__ import annotations

import os
import signal
import time

import pytest

from conftest_flight import Kernel, cache_fixture, postmortem_cli  # noqa: F401 - fixture
from nbgpu import flight, flight_reads, postmortem

GIB = 1024 ** 3


def test_torn_record_is_skipped(cache):
    rec = flight.Recorder(slots=10)
    for _ in range(5):
        rec.write({"t": time.time(), "rss": 1})
    fd = os.open(rec.path, os.O_RDWR)
    os.pwrite(fd, b"garbage!" * 20, flight.HEADER + 2 * flight.SLOT)  # a torn slot
    os.close(fd)
    header, recs = flight.read_ring(rec.path)
    assert header["pid"] == os.getpid() and not header["closed"]
    assert [r["seq"] for r in recs] == [0, 1, 3, 4]
    rec.close()
    assert flight.read_ring(rec.path)[0]["closed"] is True


def test_file_size_stays_bounded(cache):
    rec = flight.Recorder()
    for i in range(10_000):
        rec.write({"t": float(i), "rss": i})
    size = rec.path.stat().st_size
    assert size == flight.HEADER + flight.SLOTS * flight.SLOT <= 2 * 1024 * 1024
    _, recs = flight.read_ring(rec.path)
    assert len(recs) == flight.SLOTS and recs[-1]["seq"] == 9_999 and recs[0]["seq"] == 9_400
    rec.close()


def test_a_real_reading_fits_a_slot(cache):
    rec = flight.Recorder()
    r = rec.readings.read(rec.cell)
    assert r["ram_total"] > 0 and r["rss"] > 0
    rec.write(r)
    assert flight.read_ring(rec.path)[1][0]["rss"] == r["rss"]
    rec.close()


def test_a_record_reads_back_as_it_was_written_and_a_new_cell_or_fault_is_in_the_next(cache):
    rec = flight.Recorder()
    r = dict(rec.readings.read(None), gpus=[[80.5 * GIB, 141.0 * GIB, 97.0, 612.3, 71.0, 4.0], [None] * 6],
             cell=[7, "train(model)", 1.7e9, "cell-id-1"], cg_max=None, cg_cur=12 * GIB, cg_oom=0)
    rec.write(r)
    rec.write(dict(r, cell=[8, "evaluate()", 1.7e9 + 5, None], xid=[[1.7e9 + 6, 0, 79]]))
    first, second = flight.read_ring(rec.path)[1]
    assert {k: first[k] for k in r} == r and first["seq"] == 0 and "xid" not in first
    assert second["cell"] == [8, "evaluate()", 1.7e9 + 5, None] and second["xid"] == [[1.7e9 + 6, 0, 79]]
    rec.close()


def test_a_ring_written_with_json_records_still_reads(cache):
    """Rings of kernels that died under the release before the binary records are still read."""
    rec = flight.Recorder(slots=4)
    old = {"t": 1.7e9, "ram_total": 64 * GIB, "ram_avail": GIB, "ram_used": 63 * GIB, "rss": 40 * GIB,
           "cpu": 99.0, "gpus": [], "cell": [3, "x = make()", 1.7e9 - 9, None], "seq": 0}
    os.pwrite(rec.fd, flight._pack(old, flight.SLOT), flight.HEADER)  # the old layout: JSON
    assert flight.read_ring(rec.path)[1] == [old]
    rec.close()


def test_read_only_cache_dir_warns_once_and_does_not_raise(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")  # the cache folder cannot be made under a file, even as root
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(flight, "_warned", False)
    assert flight.start() is None
    assert flight.start() is None
    err = capsys.readouterr().err
    assert err.count("cannot keep a flight record") == 1 and len(err.strip().splitlines()) == 1


def test_full_disk_while_recording_warns_once(cache, monkeypatch, capsys):
    import errno

    monkeypatch.setattr(flight, "_warned", False)
    rec = flight.Recorder(slots=4)

    def full(*a: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rec, "write", full)
    monkeypatch.setattr(flight._stop, "wait", lambda timeout: False)
    flight._loop(rec)  # returns after the first failure instead of raising
    rec.close()
    assert capsys.readouterr().err.count("No space left on device") == 1


def _waits_of_loop(rec, monkeypatch, clock, times: int, step_s: float | None = None) -> list[float]:
    """Run the recorder's loop on ``clock`` for ``times`` waits, each moving the clock by the
    wait asked for (or ``step_s``); the waits it asked for."""
    waits: list[float] = []

    def wait(timeout: float) -> bool:
        waits.append(timeout)
        clock.t += timeout if step_s is None else step_s
        return len(waits) > times

    monkeypatch.setattr(rec, "monotonic", clock)
    monkeypatch.setattr(flight._stop, "wait", wait)
    flight._loop(rec)
    return waits


def test_records_come_four_a_second_while_memory_is_near_its_limit(cache, monkeypatch, clock):
    rec = flight.Recorder(slots=8)
    used = iter([50, 85, 50])  # % of host RAM
    monkeypatch.setattr(rec.readings, "read",
                        lambda *_: {"t": clock(), "ram_total": 100, "ram_used": next(used)})
    monkeypatch.setattr(rec, "monotonic", clock)
    rec.record()  # as start() does
    waits = _waits_of_loop(rec, monkeypatch, clock, 2)
    rec.close()
    assert waits == pytest.approx([flight.EVERY_S, flight.NEAR_EVERY_S, flight.EVERY_S])
    assert flight.near_limit({"cg_max": 100, "cg_cur": 81}) and not flight.near_limit({"cg_max": 100})


def test_a_running_sampler_writes_the_records_at_its_ticks_and_the_thread_only_checks(cache, monkeypatch,
                                                                                     clock, stepped):
    """The shared sampler's thread, awake anyway, writes one record a second; the recorder's own
    thread then wakes only when the ticks' records would be ``STALL_S`` overdue, writes each second
    while they stall, and takes over again once the sampler stops."""
    from nbgpu import session

    s = stepped(count=1, interval=0.25)
    monkeypatch.setattr(session, "shared_sampler", lambda: s)
    monkeypatch.setattr(type(s), "running", property(lambda self: not getattr(self, "_test_off", False)))
    rec = flight.Recorder(slots=60)
    monkeypatch.setattr(flight, "_rec", rec)  # as start() makes it, without its thread
    monkeypatch.setattr(rec, "monotonic", clock)
    try:
        assert flight._follow_sampler()
        seq0 = rec.seq
        clock.run(s, 10.0)  # 40 ticks of the sampler: 10 records, not 40
        assert 9 <= rec.seq - seq0 <= 11
        seq1 = rec.seq
        since_record_s = clock() - rec.last_at
        waits = _waits_of_loop(rec, monkeypatch, clock, 1, step_s=0.5)  # wakes just after a tick's record
        assert waits[0] == pytest.approx(flight.STALL_S - since_record_s)
        assert rec.seq == seq1  # it only checked, and sleeps until the ticks would be overdue
        waits = _waits_of_loop(rec, monkeypatch, clock, 3)  # no tick since: a stalled sampler
        assert rec.seq == seq1 + 3 and waits[1:] == pytest.approx([flight.EVERY_S] * 3)
        s._test_off = True  # the sampler stopped: the thread writes once a second again
        seq2 = rec.seq
        waits = _waits_of_loop(rec, monkeypatch, clock, 3)
        assert rec.seq - seq2 >= 2 and waits[-1] == pytest.approx(flight.EVERY_S)
    finally:
        flight.stop()


def test_oom_verdict_from_ram_at_99_percent_and_rss_rising():
    total = 62.8 * GIB
    recs = [{"t": 100.0 + i, "ram_total": total, "ram_used": total * (0.90 + 0.01 * i),
             "rss": (40 + 2 * i) * GIB, "gpus": []} for i in range(10)]
    v = postmortem.verdict(recs)
    assert v.startswith("likely killed by the out-of-memory killer: host RAM 99 %"), v
    assert "62.8 GiB" in v and "this kernel 58.0 GiB" in v and "rising 2.0 GiB/s" in v
    recs[-1]["cg_oom"], recs[0]["cg_oom"] = 3, 2
    assert postmortem.verdict(recs).startswith("confirmed killed")
    for r in recs:  # memory far from its limit: a risen count may be another process's kill
        r["ram_used"] = total / 2
    said = postmortem.verdict(recs)
    assert said.startswith("likely killed by the out-of-memory killer: its cgroup's oom_kill"), said


def test_the_kernel_log_confirms_an_oom_kill(tmp_path):
    log = tmp_path / "kmsg"
    log.write_bytes(b"6,1,200000,-;Memory cgroup out of memory: Killed process 4242 (python) total-vm:1kB\n")
    assert postmortem.oom_killed_in_log(4242, str(log)) is True
    assert postmortem.oom_killed_in_log(424, str(log)) is False
    assert postmortem.oom_killed_in_log(4242, str(tmp_path / "none")) is None
    assert postmortem.oom_killed_in_log(4242, str(log), after_s=1.0) is False  # pid of an older process
    recs = [{"t": float(i), "ram_total": 64 * GIB, "ram_used": 8 * GIB, "rss": GIB, "gpus": []}
            for i in range(3)]
    assert "crash inside native code" in postmortem.verdict(recs, logged_oom=False)
    said = postmortem.verdict(recs, logged_oom=True)
    assert said.startswith("confirmed killed by the out-of-memory killer: the kernel log says so"), said
    recs[-1]["ram_used"] = 63.9 * GIB
    assert postmortem.verdict(recs, logged_oom=True).startswith("confirmed killed by the out-of-memory "
                                                                "killer: host RAM 100 %")


def test_no_limit_near_means_native_crash():
    recs = [{"t": float(i), "ram_total": 64 * GIB, "ram_used": 8 * GIB, "rss": GIB,
             "gpus": [[1 * GIB, 80 * GIB, 10.0, 100.0, 40.0]]} for i in range(5)]
    assert "crash inside native code" in postmortem.verdict(recs)
    recs[-1]["gpus"] = [[79.5 * GIB, 80 * GIB, 99.0, 300.0, 70.0]]
    assert postmortem.verdict(recs).startswith("GPU 0 memory was full")


def test_an_xid_from_the_sampler_is_in_the_next_record_and_names_the_cause(cache, monkeypatch):
    from conftest_diagnostics import drive, sim_sampler
    from nbgpu import SimulatedGPUs, session

    sim = SimulatedGPUs(count=2)
    s, clock = sim_sampler(source=sim)
    s.source.open()
    monkeypatch.setattr(session, "_shared", s)
    rec = flight.Recorder(slots=16)
    try:
        drive(s, clock, 1.0)
        rec.write()
        sim.inject_xid(1, 79)
        drive(s, clock, 1.0)
        rec.write()
        rec.write()  # the fault stays in every later record, read from the store once
    finally:
        rec.close()
        s.stop()
    recs = flight.read_ring(rec.path)[1]
    assert "xid" not in recs[0]
    assert [x[1:] for x in recs[1]["xid"]] == [[1, 79]] == [x[1:] for x in recs[2]["xid"]]
    for r in recs:
        r["t"] = recs[0]["t"] + r["seq"]
    cause = postmortem.verdict(recs)
    assert cause.startswith("GPU 1 reported XID 79 (GPU has fallen off the bus)"), cause
    assert "GPU fault is the likely cause" in cause
    info = postmortem.describe({"pid": 1}, recs)
    assert [(x["gpu"], x["code"], x["meaning"]) for x in info["xids"]] == [
        (1, 79, "GPU has fallen off the bus")]


def test_memory_at_its_limit_outranks_an_xid_and_earlier_xids_are_named():
    total = 64 * GIB
    recs = [{"t": float(i), "ram_total": total, "ram_used": 8 * GIB, "rss": GIB, "gpus": [],
             "xid": [[0.5, 0, 13], [1.0, 1, 48]][: i + 1]} for i in range(3)]
    cause = postmortem.verdict(recs)
    assert cause.startswith("GPU 1 reported XID 48 (double-bit ECC error) 1 s before"), cause
    assert cause.endswith("(earlier: XID 13 on GPU 0)"), cause
    recs[-1]["ram_used"] = 0.99 * total
    assert "out-of-memory killer" in postmortem.verdict(recs)


def test_a_day_on_a_fake_clock_keeps_the_file_at_its_size_and_fsyncs_bounded(cache, monkeypatch):
    from conftest_diagnostics import FakeClock

    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)  # counted, not waited for: a day of them
    clock = FakeClock()
    rec = flight.Recorder(clock=clock)
    size = rec.path.stat().st_size
    assert size == flight.HEADER + flight.SLOTS * flight.SLOT  # its whole size from the start
    gpus = [[140.0 * GIB, 141.0 * GIB, 100.0, 699.9, 85.0, 4.0] for _ in range(8)]  # the largest record
    cell = [12345, "x" * 120, clock.t]
    day = 24 * 3600
    for i in range(day):
        clock.t += 1.0
        rec.write({"t": clock.t, "rss": 60 * GIB + i, "ram_total": 2000 * GIB, "ram_used": 1000 * GIB,
                   "gpus": gpus, "cell": cell, "xid": [[clock.t, 7, 95]] * flight_reads.XIDS_KEPT})
        if i % 3600 == 0:
            assert rec.path.stat().st_size == size, i
    assert rec.path.stat().st_size == size <= 2 * 1024 * 1024
    assert day / flight.FSYNC_EVERY_S <= len(synced) <= day / flight.FSYNC_EVERY_S + 1
    recs = flight.read_ring(rec.path)[1]
    assert len(recs) == flight.SLOTS and recs[-1]["seq"] == day - 1
    assert recs[-1]["cell"] == cell and recs[-1]["xid"][0][1:] == [7, 95]  # kept when GPUs are cut
    rec.close()


@pytest.mark.kernel
def test_killed_kernel_is_reported_once_at_the_next_load(cache):
    first = Kernel()
    try:
        first.text("%load_ext nbgpu\nimport time")
        pid = first.pid
        first.start("for i in range(1000): time.sleep(0.1)")
        first.wait_for_cell_record(cache)
        os.kill(pid, signal.SIGKILL)
        first.wait_dead()
    finally:
        first.close()
    second = Kernel()
    try:
        out = second.text("%load_ext nbgpu")
        assert f"the last kernel (pid {pid}) died at about" in out, out
        assert "In [2] `for i in range(1000): time.sleep(0.1)`" in out, out
        cli = postmortem_cli()
        assert cli.returncode == 0 and f"(pid {pid}) died" in cli.stdout, cli
        second.text("%unload_ext nbgpu")
        assert "died" not in second.text("%load_ext nbgpu")
    finally:
        second.shut_down()
    third = Kernel()
    try:
        assert "died" not in third.text("%load_ext nbgpu")
    finally:
        third.close()
    assert postmortem_cli("--clear").returncode == 0


@pytest.mark.kernel
def test_gpumon_stop_closes_the_ring_and_gpumon_records_again(cache):
    k = Kernel()
    try:
        k.text("%load_ext nbgpu")
        ring = next(cache.glob(f"flight-*-{k.pid}-*.ring"))
        k.text("%gpumon --source sim --interval 0.2")
        k.text("%gpumon stop")
        assert flight.read_ring(ring)[0]["closed"]  # a clean stop: nothing to report if it dies now
        k.text("%gpumon --source sim --interval 0.2")
        assert not flight.read_ring(ring)[0]["closed"]
        k.text("%gpumon stop")
        k.text("%unload_ext nbgpu")
        k.text("%load_ext nbgpu\n%unload_ext nbgpu")
        assert flight.read_ring(ring)[0]["closed"]
    finally:
        k.close()
    assert postmortem.dead_rings() == []


@pytest.mark.kernel
def test_clean_shutdown_gives_no_report(cache):
    k = Kernel()
    k.text("%load_ext nbgpu")
    k.shut_down()
    rings = list(cache.glob("flight-*.ring"))
    assert rings and all(flight.read_ring(p)[0]["closed"] for p in rings)
    assert postmortem.dead_rings() == []
    k = Kernel()
    try:
        assert "died" not in k.text("%load_ext nbgpu")
    finally:
        k.close()


def test_dead_ring_is_reported_once_and_cleared(cache):
    import json

    rec = flight.Recorder(slots=8)
    t0 = time.time()
    for i in range(4):
        rec.write({"t": t0 + i, "rss": GIB, "ram_total": 64 * GIB, "ram_used": 8 * GIB,
                   "gpus": [], "cell": [5, "train()", t0 - 10]})
    rec.close()
    flight.set_flag(rec.path, closed=False, start=-1)  # as if its process died, never closed
    assert json.loads(postmortem_cli("--json").stdout) == json.loads(postmortem_cli("--all", "--json").stdout)
    info = json.loads(postmortem_cli("--json").stdout)[0]
    assert info["cell"] == {"execution_count": 5, "first_line": "train()", "running_s": 13.0, "cell_id": None}
    assert "crash inside native code" in info["cause"]
    flight.set_flag(rec.path, reported=False)
    lines = postmortem.report_at_load()
    assert len(lines) == 1 and "In [5] `train()` had run 13 s" in lines[0]
    assert postmortem.report_at_load() == []
    done = postmortem_cli("--clear")
    assert done.returncode == 0 and "removed 1" in done.stdout and not rec.path.exists()
    assert json.loads(postmortem_cli("--json").stdout) == []


def test_two_kernels_loading_at_once_report_a_death_once(cache):
    """Each load claims a ring under a lock: of two kernels reading the same dead ring at the
    same moment, one reports it."""
    rec = flight.Recorder(slots=4)
    rec.write({"t": time.time(), "rss": GIB, "gpus": []})
    rec.close()
    flight.set_flag(rec.path, closed=False, start=-1)
    found = [postmortem.dead_rings(), postmortem.dead_rings()]  # both read it before either reports
    assert [len(f) for f in found] == [1, 1]
    claims = [postmortem.claim(path) for f in found for path, _ in f]
    assert claims == [True, False]
    assert postmortem.report_at_load() == []


def test_gpus_of_a_running_sampler_are_recorded(cache):
    from nbgpu import Sampler, SimulatedGPUs, session

    s = Sampler(SimulatedGPUs(count=2, seed=1), interval=0.1).start()
    try:
        time.sleep(0.5)
        session._shared = s
        rec = flight.Recorder(slots=4)
        r = rec.readings.read(rec.cell)
        rec.close()
    finally:
        session._shared = None
        s.stop()
    assert len(r["gpus"]) == 2 and r["gpus"][0][1] > 0


@pytest.mark.gpu
def test_the_ring_is_fed_by_real_nvml(nvml, cache, monkeypatch):
    from nbgpu import Sampler, session

    s = Sampler("nvml", interval=0.2).start()
    try:
        monkeypatch.setattr(session, "_shared", s)
        deadline = time.monotonic() + 10
        while s.ticks < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        rec = flight.Recorder(slots=4)
        rec.write()
        rec.close()
    finally:
        s.stop()
    gpus = flight.read_ring(rec.path)[1][-1]["gpus"]
    cards = nvml.nvmlDeviceGetCount()
    assert len(gpus) >= cards
    total = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(0)).total
    used, total_seen, util, power, temp, _reasons = gpus[0]
    assert total_seen == total and 0 < used <= total
    assert 0 <= util <= 100 and 10 < power < 2000 and 0 < temp < 120


def test_a_record_at_a_tick_takes_host_ram_from_that_tick_and_reads_meminfo_every_tenth(cache, stepped,
                                                                                       monkeypatch):
    from nbgpu.metrics import HOST_KEY

    gib = 2**30
    fake = {b"MemTotal": 7 * gib, b"MemAvailable": 5 * gib, b"SwapTotal": 0, b"SwapFree": 0}
    monkeypatch.setattr(flight_reads, "_meminfo", lambda _text: dict(fake))
    s = stepped(count=1)
    rec = flight.Recorder(slots=32)
    ticks = []  # each tick's host row
    try:
        for _ in range(flight_reads.SLOW_EVERY + 1):
            stepped.run(s, 1.0)
            ticks.append(s.store.last_many(HOST_KEY))
            rec.record(s, ticks[-1]["host_ram_total_bytes"][0])
        rec.record()  # from the recorder's thread, no tick: its own read
    finally:
        rec.close()
    _, recs = flight.read_ring(rec.path)
    sampled = s.store.last_many(HOST_KEY)["host_ram_total_bytes"][1]
    totals = [r["ram_total"] for r in recs]
    assert totals[0] == totals[flight_reads.SLOW_EVERY] == totals[-1] == 7 * gib  # full reads
    assert set(totals[1:flight_reads.SLOW_EVERY]) == {sampled} != {7 * gib}
    assert all(r["swap_used"] == 0 for r in recs)
    for r, host in list(zip(recs, ticks, strict=False))[1:flight_reads.SLOW_EVERY]:
        assert r["rss"] == host["proc_rss_bytes"][1]  # the tick's figures of this kernel and its children
        assert r["cpu"] == round(host["proc_cpu_pct"][1], 1)
