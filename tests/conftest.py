"""Fixtures shared by every test area."""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass, field

import pytest

# Kernels of other tests keep no flight record and report none (tests/test_flight.py turns
# it on, with its own cache folder); a killed test kernel must not speak at the next load.
os.environ["NBGPU_FLIGHT_RECORDER"] = "0"


@pytest.fixture(scope="module")
def nvml():
    """The real pynvml module, initialised for the test module; skip where NVML is absent."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # no library, no driver, no GPU
        pytest.skip(f"NVML not available here: {exc}")
    yield pynvml
    pynvml.nvmlShutdown()


# -- one fake clock, one stepped sampler, one recording comm ----------------------------------
T0 = 1_800_000_000.0
SETTLE_TIMEOUT_S = 10.0  # a sampler thread that takes no step in this long is broken, not slow


class FakeClock:
    """Epoch seconds that move only when a test moves them (``t``); a sampler and its
    simulated GPUs share one."""

    SETTLE_TIMEOUT_S = SETTLE_TIMEOUT_S

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def run(self, s, seconds: float) -> None:
        """Step ``s`` (no thread) at every wake-up its thread would have in ``seconds``."""
        if s.next_wake() == -math.inf:  # never stepped: the probe just took a GPM sample at
            self.t += 1e-3              # this clock time, and GPM needs two distinct times
        end = self.t + seconds
        while self.t <= end + 1e-9:
            s.step(self.t)
            self.t = max(s.next_wake(), self.t + 1e-6)
        self.t = end

    def advance(self, s, seconds: float) -> None:
        """Let ``seconds`` pass for a sampler whose thread runs: it steps at the new time."""
        self.t += seconds
        self.settle(s)

    @staticmethod
    def settle(s) -> None:
        """Wait until the running sampler's thread has finished two more steps.

        The second one began after this call, so it read the clock as it stands now and served
        every read asked for before (a capture's edge). With a fake clock standing still, the
        thread steps again after each of its waits (an interval at most), however it is scheduled.
        """
        steps: list[float] = []
        stepped_twice = threading.Event()

        def on_step(_sampler, now: float) -> None:
            steps.append(now)
            if len(steps) >= 2:
                stepped_twice.set()

        s.add_listener(on_step)
        try:
            assert stepped_twice.wait(SETTLE_TIMEOUT_S), f"the sampler thread took {len(steps)} step(s)"
        finally:
            s.remove_listener(on_step)


class Stepped:
    """Samplers on simulated GPUs that share one fake clock; each is stopped after the test."""

    T0 = T0

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.made: list = []

    def gpus(self, count: int = 2, **kw):
        """``SimulatedGPUs`` on the clock (``seed``, ``scenario``, faults as keywords)."""
        from nbgpu.sources.simulated import SimulatedGPUs

        return SimulatedGPUs(count=count, clock=self.clock, **kw)

    def __call__(self, source: object = None, count: int = 2, **kw):
        """A Sampler on ``source`` (default: ``count`` simulated GPUs) and the clock, not started."""
        from nbgpu import Sampler

        s = Sampler(self.gpus(count) if source is None else source, clock=self.clock, **kw)
        self.made.append(s)
        return s

    def run(self, s, seconds: float) -> None:
        self.clock.run(s, seconds)

    @staticmethod
    def new_clock(t: float = T0) -> FakeClock:
        """Another fake clock (a second run to compare side by side starts at ``T0`` too)."""
        return FakeClock(t)

    def fake(self, count: int = 2, **kw):
        """``(SimulatedGPUs, FakeClock)``: ``count`` simulated GPUs on a fake clock of their own."""
        from nbgpu.sources.simulated import SimulatedGPUs

        clock = FakeClock()
        return SimulatedGPUs(count=count, clock=clock, **kw), clock

    @staticmethod
    def drains(sim) -> list[int]:
        """The sampling type of every ``nvmlDeviceGetSamples`` call of ``sim`` from now on."""
        kinds: list[int] = []
        original = sim.nvmlDeviceGetSamples

        def spy(handle, kind, since):
            kinds.append(kind)
            return original(handle, kind, since)

        sim.nvmlDeviceGetSamples = spy
        return kinds


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock at ``T0``."""
    return FakeClock()


@pytest.fixture(scope="session")
def make_clock():
    """``make_clock(t=T0)``: a fake clock, for fixtures wider than one test."""
    return FakeClock


@pytest.fixture
def stepped(clock):
    """Make samplers on simulated GPUs and the ``clock`` fixture, stepped by ``clock.run``."""
    made = Stepped(clock)
    yield made
    for s in made.made:
        s.stop()


@dataclass
class Sent:
    """One message a widget would have sent: its comm's id, its data, its buffers."""

    comm_id: str
    msg_type: str
    data: dict
    buffers: list = field(default_factory=list)

    @property
    def keys(self) -> tuple[str, ...]:
        """The state keys of an update (empty for other messages)."""
        return tuple(sorted(self.data.get("state", {}))) if self.data.get("method") == "update" else ()


class CommLog:
    """Every message widgets made during a test would have sent to the front end."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self.lock = threading.Lock()

    def updates(self, widget=None) -> list[Sent]:
        """State updates sent (by ``widget`` only, if given)."""
        with self.lock:
            return [m for m in self.sent if m.data.get("method") == "update"
                    and (widget is None or m.comm_id == widget.model_id)]

    def clear(self) -> None:
        with self.lock:
            self.sent.clear()


@pytest.fixture
def comm_log(monkeypatch) -> CommLog:
    """Widgets made from now on record what they would send, instead of sending it."""
    import comm
    from comm.base_comm import BaseComm

    log = CommLog()

    class RecordingComm(BaseComm):
        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys) -> None:
            with log.lock:
                log.sent.append(Sent(self.comm_id, msg_type, data or {},
                                     [bytes(memoryview(b)) for b in buffers or ()]))

    monkeypatch.setattr(comm, "create_comm", lambda *a, **kw: RecordingComm(*a, **kw))
    return log
