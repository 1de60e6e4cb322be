"""Values shown as live that are not (issue 34, items 13-14): readings after a hang, after a
buffer's last drain, a failure on one metric, and what Prometheus cannot mean."""

from __future__ import annotations

import math
import threading
import time

import numpy as np

from conftest_cli import CraftedPrometheus
from conftest_diagnostics import FakeClock, ShapedGPUs, drive, sim_sampler
from nbgpu import Sampler, SimulatedGPUs

BUSY_S = 10.3  # the work ends just after utilisation's 10 s drain


def _busy_then_idle(gpu, t, default):
    return 98.0 if t < BUSY_S else 0.0


def _power(gpu, t, default):
    return 600.0 if t < BUSY_S else 80.0


def test_idle_ticks_after_the_last_drain_are_not_filled_with_busy_utilisation():
    """An unwatched sampler drains utilisation every 10 s: 10 s of work then 4 s idle, read at
    once. The idle ticks must not say 98 % while power says idle."""
    s, clock = sim_sampler(source=ShapedGPUs(count=1, util=_busy_then_idle, power=_power), interval=0.5,
                           diagnostics=False)
    drive(s, clock, 14.0)
    df = s.timeline.to_pandas()
    idle = df[(df["time"].astype("int64") / 1e9 > s.started_at + BUSY_S + 0.1) & (df["power_w"] < 100)]
    assert len(idle) >= 4
    util = idle["util_pct"].to_numpy()
    assert not (util > 50).any(), util  # NaN (not drained yet) or a true idle reading
    drained = s.drained_until(0, "util_pct")
    late = df["time"].astype("int64").to_numpy() / 1e9 > drained
    assert np.isnan(df["util_pct"].to_numpy()[late]).all()
    assert "util_pct" in df.attrs.get("not_drained", {})


# -- a sampler thread that hangs (item 13) ------------------------------------------------------
class _Hang:
    """Hangs the sampler thread in a listener right after its first step, until released."""

    def __init__(self, s) -> None:
        self.gate, self.entered, self.sampler = threading.Event(), threading.Event(), s

        def block(sampler, now) -> None:
            self.entered.set()
            self.gate.wait(30)

        s.add_listener(block)
        s.start()
        assert self.entered.wait(10)

    def release(self) -> None:
        self.gate.set()
        self.sampler.stop()


def _sampler(**kw):
    clock = FakeClock()
    sim = SimulatedGPUs(count=1, clock=clock)
    s = Sampler(sim, interval=0.5, clock=clock, diagnostics=False, **kw)
    s.sim = sim
    return s, clock


def test_host_readings_go_stale_when_the_sampler_hangs():
    s, clock = _sampler()
    hang = _Hang(s)
    try:
        assert not math.isnan(s.latest_host()["host_ram_used_bytes"])
        clock.t += 20.0  # the thread is stuck: nothing has been read for 20 s
        host = s.latest_host()
        assert all(math.isnan(v) for v in host.values()), host
        states = s.latest()[0]["states"]  # as the GPU's own readings
        assert {states[m] for m in ("util_pct", "temp_c", "power_w", "mem_used_bytes")} == {"stale"}
    finally:
        hang.release()


def test_a_fresh_samplers_utilisation_is_not_live_long_into_a_hang():
    s, clock = _sampler(host=False)
    hang = _Hang(s)  # one step, one drain of each buffer, then nothing
    try:
        clock.t += 1.0
        assert s.latest()[0]["states"]["util_pct"] == "live"
        clock.t += 16.0  # 17 s: three periods of utilisation's 5 s drain (while watched) are gone
        row = s.latest()[0]
        assert row["states"]["util_pct"] == "stale" and math.isnan(row["util_pct"])
    finally:
        hang.release()


def test_a_failed_read_marks_only_its_metric_failed_when_the_sampler_then_hangs():
    s, clock = _sampler(host=False)
    for _ in range(8):  # 4 s of steps, every buffer drained
        clock.t += 0.5
        s.step(clock.t)
    s.sim.inject_error("nvmlDeviceGetTemperature", 999, gpu=0)
    clock.t += 0.5
    hang = _Hang(s)  # this step's temperature read fails; then the thread hangs
    try:
        clock.t += 30.0
        states = s.latest()[0]["states"]
        assert states["temp_c"] == "failed"
        wrong = {m: st for m, st in states.items() if m != "temp_c" and st == "failed"}
        assert not wrong, wrong  # not read for 30 s: stale, but their reads never failed
    finally:
        hang.release()


# -- Prometheus (item 13) ------------------------------------------------------------------------
def test_negative_and_impossible_prometheus_values_are_not_readings():
    from nbgpu.sources.prometheus import parse_matrix

    lab = {"gpu": "0", "Hostname": "n"}
    series = [({"__name__": name, **lab}, values) for name, values in (
        ("DCGM_FI_DEV_GPU_UTIL", [-50, 40, 150, 1e308]),
        ("DCGM_FI_DEV_GPU_TEMP", [-50, 45, -1e308, 60]),
        ("DCGM_FI_DEV_POWER_USAGE", [-1, 200, 300, float("inf")]))]
    payload = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": labels, "values": [[10 + i, str(v)] for i, v in enumerate(values)]}
        for labels, values in series]}}
    rows = parse_matrix(payload)["n/0"].rows
    got = {m: [rows[t][m] for t in sorted(rows) if m in rows[t]] for m in ("util_pct", "temp_c", "power_w")}
    assert got == {"util_pct": [40.0], "temp_c": [45.0, 60.0], "power_w": [200.0, 300.0]}


def test_prometheus_read_failures_are_counted_in_status_errors():
    from nbgpu.sources.prometheus import PrometheusSource

    labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "n"}
    prom = CraftedPrometheus([(labels, [1, 2, 3, 4])])
    s = Sampler(PrometheusSource(prom.url, timeout_s=0.5, poll_s=0.1), interval=0.5, host=False,
                diagnostics=False)
    prom.close()  # from now on every read is refused
    now = time.time()
    for i in range(3):
        s.step(now + 40.0 * i)  # each past the back-off of the failure before
    st = s.status()
    s.stop()
    assert st.errors == 3 and "Prometheus" in (st.last_error or "")
