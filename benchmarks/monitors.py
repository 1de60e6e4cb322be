"""The monitors compared in the overhead benchmark, each with ``start()`` and ``stop()``.

- ``none``: nothing watches the GPU.
- ``control``: a thread that waits on an event and does nothing: the overhead benchmark's
  check that its method shows no slowdown where there is none.
- ``nbgpu``: ``nbgpu.Sampler`` at its defaults.
- ``nbgpu_watched``: the same, kept live as an open panel keeps it (``watch()`` at every
  step: the sample buffers drain at their live periods), with no panel.
- ``nbgpu_panel``: the same plus the live panel (``GPUMonitor``) updating from its own
  timer at its default refresh rate, its messages going to a recording comm instead of a
  browser; the store is first given a full window of synthetic history so the panel does
  the work of one that has been open for a while.
- ``naive_50hz``: the widely copied monitoring script's loop: a daemon thread that calls
  four NVML getters per GPU every 20 ms (the power resolution nbgpu reaches) and keeps
  the readings in a list.
- ``nvitop``: nvitop's ``ResourceMetricCollector`` at its default interval, daemonized.
"""

from __future__ import annotations

import threading
import time


class Monitor:
    """Something that watches the GPUs from a background thread while a loop runs.

    ``period_s`` is how often its work repeats, so a timed block can last long enough
    to see it (and start at a random phase of it).
    """

    name = "none"
    available = True
    reason = ""
    period_s = 0.1

    def start(self) -> None:
        pass

    def stop(self) -> dict:
        """Stop watching; returns facts worth keeping (readings taken, errors)."""
        return {}


class ThreadMonitor(Monitor):
    """A monitor that runs ``target`` in one daemon thread until ``stop()``."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _start_thread(self, target, name: str) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._thread.start()

    def _end_thread(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._thread = None


class ControlMonitor(ThreadMonitor):
    """A thread that starts, waits and stops like a monitor but reads nothing."""

    name = "control"

    def start(self) -> None:
        self._start_thread(self._stop.wait, "control-monitor")

    def stop(self) -> dict:
        self._end_thread()
        return {}


class NbgpuMonitor(Monitor):
    """``nbgpu.Sampler(source, gpus)`` at default interval and read schedule."""

    name = "nbgpu"
    period_s = 1.0  # ticks every 1 s (the default), power buffer drained every 1 s

    def __init__(self, source: object = "nvml", gpus: list[int] | None = None) -> None:
        self.source, self.gpus = source, gpus
        self.sampler = None

    def start(self) -> None:
        import nbgpu

        self.sampler = nbgpu.Sampler(source=self.source, gpus=self.gpus)
        self._before_start(self.sampler)
        self.sampler.start()

    def _before_start(self, sampler) -> None:
        pass

    def stop(self) -> dict:
        s, self.sampler = self.sampler, None
        s.stop()
        return {"ticks": s.ticks, "errors": s.errors, "interval_s": s.interval}


class NbgpuWatchedMonitor(NbgpuMonitor):
    """The sampler kept live as an open panel keeps it (``watch()`` at every step, so the
    sample buffers drain at their live periods), with no panel: the arm that splits the
    panel's cost into its sampler's share and its refresh's."""

    name = "nbgpu_watched"

    def _before_start(self, sampler) -> None:
        sampler.add_listener(_watch)


def _watch(sampler, _now: float) -> None:
    sampler.watch()


class NbgpuPanelMonitor(NbgpuMonitor):
    """The sampler plus the panel's refresh code, called at the panel's own refresh rate, its
    messages sent as a kernel sends them (its session and IOPub thread; ``KernelLikeComms``)
    where ipykernel is installed, else to a recording comm."""

    name = "nbgpu_panel"

    def __init__(self, source: object = "nvml", gpus: list[int] | None = None) -> None:
        super().__init__(source, gpus)
        from .panel_driver import find_panel

        self.panel_api = find_panel()
        self.available = self.panel_api.available
        self.reason = self.panel_api.reason
        self.driver = None

    def _before_start(self, sampler) -> None:
        from .panel_driver import prefill

        prefill(sampler, self._history_s())

    def _history_s(self) -> float:
        return self.panel_api.default_window_s() + 5.0

    def start(self) -> None:
        import importlib.util

        from .panel_driver import backdate

        super().start()
        backdate(self.sampler, self._history_s())
        kernel_like = all(importlib.util.find_spec(m) is not None for m in ("ipykernel", "jupyter_client"))
        self.driver = self.panel_api.drive(self.sampler, kernel_like=kernel_like)

    def stop(self) -> dict:
        facts = self.driver.stop() if self.driver is not None else {}
        self.driver = None
        facts.update(super().stop())
        return facts


class NaivePollMonitor(ThreadMonitor):
    """A daemon thread: utilisation, memory, temperature and power of each GPU every ``period_s``."""

    name = "naive_50hz"
    period_s = 0.02

    def __init__(self, nvml=None, gpus: list[int] | None = None, period_s: float = 0.02) -> None:
        super().__init__()
        self.nvml, self.gpus, self.period_s = nvml, gpus, period_s
        self.records: list[dict] = []

    def start(self) -> None:
        if self.nvml is None:
            import pynvml

            self.nvml = pynvml
        nvml = self.nvml
        nvml.nvmlInit()
        indices = self.gpus if self.gpus is not None else range(nvml.nvmlDeviceGetCount())
        handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
        self.records = []

        def poll() -> None:
            while not self._stop.is_set():
                for i, h in handles:
                    util = nvml.nvmlDeviceGetUtilizationRates(h)
                    mem = nvml.nvmlDeviceGetMemoryInfo(h)
                    self.records.append({
                        "timestamp": time.time(), "gpu_id": i, "gpu_util_percent": util.gpu,
                        "memory_util_percent": util.memory, "memory_used_gb": mem.used / 1e9,
                        "temperature_c": nvml.nvmlDeviceGetTemperature(h, 0),
                        "power_w": nvml.nvmlDeviceGetPowerUsage(h) / 1000.0})
                time.sleep(self.period_s)

        self._start_thread(poll, "naive-gpu-poll")

    def stop(self) -> dict:
        self._end_thread()
        self.nvml.nvmlShutdown()
        return {"readings": len(self.records), "period_s": self.period_s}


class NvitopMonitor(Monitor):
    """nvitop's ``ResourceMetricCollector`` (default interval) collecting in a daemon thread."""

    name = "nvitop"
    period_s = 1.0

    def __init__(self) -> None:
        try:
            from nvitop import ResourceMetricCollector
        except ImportError:
            self.available, self.reason = False, "nvitop not installed"
            return
        self._cls = ResourceMetricCollector
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.collections = 0

    def start(self) -> None:
        self._stop.clear()
        self.collections = 0

        def on_collect(metrics: dict) -> bool:
            self.collections += 1
            return not self._stop.is_set()

        self.collector = self._cls()
        self._thread = self.collector.daemonize(on_collect=on_collect)

    def stop(self) -> dict:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._thread = None
        return {"collections": self.collections, "interval_s": getattr(self.collector, "interval", None)}
