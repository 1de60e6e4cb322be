"""NVML sample-buffer drains: none that cannot find anything new, edges without the counter."""

from __future__ import annotations

import numpy as np
import pytest

import nbgpu

POWER, UTIL, MEMUTIL = 0, 1, 2


def test_drains_that_cannot_find_a_new_sample_are_not_made(stepped):
    # A capture edge every 10 ms asks for drains; utilisation has a sample every 200 ms and
    # power every 20 ms, so most of those drains could only come back empty.
    sim, clock = stepped.fake(1)
    kinds = stepped.drains(sim)
    s = nbgpu.Sampler(source=sim, interval=0.5, energy_every_s=60, clock=clock)
    clock.run(s, 3.0)
    kinds.clear()
    for _ in range(100):
        s.request("edge")
        clock.run(s, 0.01)
    s.stop()
    assert kinds.count(UTIL) <= 6 and kinds.count(MEMUTIL) <= 6
    assert 40 <= kinds.count(POWER) <= 56
    t, _ = s.timeline.series(0, "util_pct")
    assert np.median(np.diff(t[-10:])) == pytest.approx(0.2, abs=1e-6)  # none lost


def test_an_edge_read_reads_memory_and_not_the_energy_counter(stepped):
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, interval=5.0, energy_every_s=60, clock=clock)
    clock.run(s, 1.0)
    energy_calls = sim.calls["nvmlDeviceGetTotalEnergyConsumption"]
    n_mem = len(s.timeline.series(0, "mem_used_bytes")[0])
    s.request("edge")
    clock.run(s, 0.01)
    s.stop()
    assert sim.calls["nvmlDeviceGetTotalEnergyConsumption"] == energy_calls
    assert len(s.timeline.series(0, "mem_used_bytes")[0]) == n_mem + 1


@pytest.mark.parametrize("code, errors", [(999, 1), (3, 0)])
def test_drain_faults_are_counted_and_an_unsupported_buffer_is_polled(code, errors, stepped):
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, interval=0.5, energy_every_s=60, clock=clock)
    clock.run(s, 2.0)
    sim.inject_error("nvmlDeviceGetSamples", code, times=1)
    before = s.errors
    clock.run(s, 1.0)
    s.stop()
    assert s.errors - before >= errors
    if code == 3:  # NotSupported: that buffer is gone and its metric is polled instead
        assert len(s.source._devices[0].buffers) == 2


def _util_drains(stepped, watch_every_s: float | None, seconds: float, ask=None,
                 **kw) -> tuple[list[int], nbgpu.Sampler]:
    """Utilisation drains in ``seconds`` at defaults, ``ask(s)`` (default: ``s.watch()``) called
    every ``watch_every_s``."""
    sim, clock = stepped.fake(1)
    kinds = stepped.drains(sim)
    s = nbgpu.Sampler(source=sim, energy_every_s=600, clock=clock, **kw)
    clock.run(s, 5.0)
    kinds.clear()
    step = watch_every_s or seconds
    for _ in range(round(seconds / step)):
        if watch_every_s is not None:
            (ask or nbgpu.Sampler.watch)(s)
        clock.run(s, step)
    s.stop()
    return kinds, s


def test_with_no_one_watching_utilisation_is_drained_every_10_s_and_no_sample_is_lost(stepped):
    # Each utilisation drain costs ~2.5 ms of CPU on an H200 whatever it returns, and the
    # buffer holds ~14 s: a sampler nobody reads live values from (a script, a recording,
    # the diagnostics rules alone) drains it as often as memory-bandwidth utilisation.
    kinds, s = _util_drains(stepped, None, 40.0)
    assert 4 <= kinds.count(UTIL) <= 5
    assert 39 <= kinds.count(POWER) <= 41  # power keeps its 1 s (its buffer holds 2.4 s)
    t, _ = s.timeline.series(0, "util_pct")
    assert np.max(np.diff(t[-150:])) == pytest.approx(0.2, abs=1e-6)  # native 200 ms kept


def test_a_live_view_asking_every_second_gets_utilisation_drained_every_5_s(stepped):
    kinds, _ = _util_drains(stepped, 1.0, 40.0)
    assert 8 <= kinds.count(UTIL) <= 9


def _read_everything(s: nbgpu.Sampler) -> None:
    """Every read a script or view makes of a sampler, none of them a watch."""
    s.latest()
    s.latest_host()
    s.status()
    s.alert_list()
    s.alerts  # noqa: B018 -- a property read
    s.timeline.to_pandas()
    s.timeline.between(s.now() - 5, s.now()).series(0, "util_pct")


def test_reads_keep_nothing_live(stepped):
    # Reading the newest values (a script printing them, the CLI's status line) says nothing
    # about someone looking: only watch() -- a live panel, a scrape -- keeps the drains live.
    kinds, _ = _util_drains(stepped, 1.0, 40.0, ask=_read_everything)
    assert 4 <= kinds.count(UTIL) <= 5


def test_a_live_panel_and_a_prometheus_scrape_watch(stepped):
    # What a person looks at keeps the newest utilisation at most 5 s old: a panel on the
    # timer refreshing every second, a Prometheus server scraping every second.
    from nbgpu.exporter import prometheus_text
    from nbgpu.widgets.monitor import GPUMonitor

    panels = []

    def refresh(s: nbgpu.Sampler) -> None:
        if not panels:
            panels.append(GPUMonitor(sampler=s, start=False, processes=False))
        panels[0].refresh(force=True, now=s.now())

    try:
        for ask in (refresh, prometheus_text):
            kinds, _ = _util_drains(stepped, 1.0, 40.0, ask=ask, host=False)
            assert 8 <= kinds.count(UTIL) <= 9, ask
    finally:
        for mon in panels:
            mon.close()


def test_reads_change_nothing_that_is_sampled(stepped):
    # Two samplers of the same seeded GPUs on the same fake times: one read every second
    # in every way, one never read, sample exactly the same and end with the same alerts.
    _, read = _util_drains(stepped, 1.0, 40.0, ask=_read_everything, host=False)
    _, unread = _util_drains(stepped, 1.0, 40.0, ask=lambda s: None, host=False)
    a, b = read.timeline.to_pandas(), unread.timeline.to_pandas()
    assert a.equals(b)
    assert read.alert_list() == unread.alert_list()


def test_a_view_that_stops_asking_lets_the_drains_slow_down_again(stepped):
    sim, clock = stepped.fake(1)
    kinds = stepped.drains(sim)
    s = nbgpu.Sampler(source=sim, energy_every_s=600, clock=clock)
    for _ in range(10):
        s.watch()
        clock.run(s, 1.0)
    kinds.clear()
    clock.run(s, 40.0)  # the view was closed: nobody asks any more
    s.stop()
    assert 4 <= kinds.count(UTIL) <= 6


def test_rules_strict_about_staleness_do_not_keep_the_drains_live(stepped):
    # The rules judge a buffered metric up to where its buffer was drained, so how old
    # they let a reading be does not depend on how often nobody-watched buffers drain.
    kinds, _ = _util_drains(stepped, None, 40.0, thresholds={"stale_after_s": 3.0})
    assert 4 <= kinds.count(UTIL) <= 5


def test_stopping_drains_what_the_buffers_still_hold(stepped):
    # Nobody watches, so utilisation waits up to 10 s between drains: a stop must not leave
    # the samples since the last drain in NVML's buffer, where they would be lost.
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, energy_every_s=600, clock=clock)
    clock.run(s, 5.0)
    clock.t += 3.5  # no step meanwhile: as if the thread had slept since the last wake-up
    s.start()  # the thread's first step reads at this clock time
    s.stop()
    for metric in ("util_pct", "power_w", "mem_util_pct"):
        t, _ = s.timeline.series(0, metric)
        assert t[-1] >= clock.t - 0.2, metric


def test_drained_until_trails_the_oldest_buffer_drain_and_ends_with_the_gpu(stepped):
    sim, clock = stepped.fake(2)
    s = nbgpu.Sampler(source=sim, energy_every_s=600, clock=clock)
    t0 = clock.t
    clock.run(s, 12.5)  # memory-bandwidth utilisation last drained at 10 s, the others later
    assert s.drained_until(0) == pytest.approx(t0 + 10.0 - 0.2, abs=0.05)  # less one spacing
    s.request("edge")  # every buffer drained now
    clock.run(s, 0.01)
    assert s.drained_until(0) == pytest.approx(clock.t - 0.2, abs=0.05)
    assert s.drained_until(0) <= s.timeline.series(0, "util_pct")[0][-1] + 1e-6
    sim.lose_gpu(1)
    clock.run(s, 1.0)
    assert s.drained_until(1) == np.inf  # nothing more will come from a lost GPU
    s.stop()


def test_drained_until_follows_edges_that_find_nothing_new_yet_and_stops_at_a_failed_drain(stepped):
    sim, clock = stepped.fake(1)
    s = nbgpu.Sampler(source=sim, energy_every_s=600, clock=clock)
    clock.run(s, 3.0)
    for _ in range(20):  # edges 10 ms apart: most drains are skipped, nothing new can exist yet
        s.request("edge")
        clock.run(s, 0.01)
    assert s.drained_until(0) == pytest.approx(clock.t - 0.2, abs=0.03)
    held = s.drained_until(0)
    sim.inject_error("nvmlDeviceGetSamples", 999)  # an unknown error: the drains fail
    clock.t += 0.5
    s.request("edge")
    clock.run(s, 0.01)
    s.stop()
    assert s.drained_until(0) == held  # a failed drain completes nothing
