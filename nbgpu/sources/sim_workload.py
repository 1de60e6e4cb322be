"""The load model of ``SimulatedGPUs``: utilisation, memory, power and temperature over time,
shaped by a scenario. ``SimulatedGPUs`` mixes this in."""

from __future__ import annotations

SCENARIOS = ("steady", "input_bound", "leak", "oom", "imbalance", "throttle", "thin", "idle")


def _noise(*keys: int) -> float:
    """Deterministic pseudo-random number in [0, 1) from integer keys."""
    h = 0x9E3779B1
    for k in keys:
        h = ((h ^ (k & 0xFFFFFFFF)) * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & 0xFFFFFFFF
        h ^= h >> 16
    return h / 2**32



class Workload:
    """SimulatedGPUs' load model (it uses ``clock``, ``start_time``, ``seed``, ``scenario``,
    ``count``, ``mem_total_bytes`` and ``power_limit_w``)."""

    def _t(self) -> float:
        return self.clock() - self.start_time

    def util_at(self, gpu: int, t: float) -> float:
        """Percent of time a kernel ran on ``gpu`` around ``t`` seconds after start."""
        s = self.scenario
        if s == "idle" or (s == "imbalance" and gpu == self.count - 1):
            return 2.0 * _noise(self.seed, gpu, int(t * 5))
        if s == "input_bound":
            phase = (t + 0.13 * gpu) % 1.0
            return 100.0 if phase < 0.25 else 0.0
        if t < 1.5:
            return max(0.0, 10.0 * t)
        k = int(t * 5)
        base = 93.0 + 6.0 * (_noise(self.seed, gpu, k) - 0.5)
        if (t % 8.0) < 0.6:  # a short evaluation / data pause every 8 s
            base = 35.0 + 10 * _noise(self.seed, gpu, k, 1)
        return min(100.0, base)

    def util_window(self, gpu: int, t: float, window: float = 0.2) -> float:
        """Mean utilisation over the ``window`` seconds before ``t`` (what NVML reports)."""
        return sum(self.util_at(gpu, max(0.0, t - window * (i + 0.5) / 8)) for i in range(8)) / 8

    def mem_used_at(self, gpu: int, t: float) -> float:
        total = self.mem_total_bytes
        base = 0.55e9
        s = self.scenario
        if s == "idle":
            return base
        if s == "imbalance" and gpu == self.count - 1:  # a rank that holds its model, gets no work
            return base + 0.1 * total * min(1.0, t / 6.0)
        if s == "oom":
            return base + (0.965 * total - base) * min(1.0, t / 8.0)
        ramp = min(1.0, t / 6.0)
        used = base + 0.5 * total * ramp
        if s == "leak":
            used += 31e6 * t  # about +310 MB every 10 s, never freed
        return min(used + 64e6 * _noise(self.seed, gpu, int(t)), total)

    def power_at(self, gpu: int, t: float) -> float:
        if self.scenario == "throttle":
            return self.power_limit_w * (0.985 + 0.02 * _noise(self.seed, gpu, int(t * 50)))
        util = self.util_window(gpu, t, 0.1) if self.scenario == "input_bound" else self.util_at(gpu, t)
        idle = 75.0
        p = idle + (self.power_limit_w * 0.86 - idle) * util / 100.0
        return p + 8.0 * (_noise(self.seed, gpu, int(t * 50), 7) - 0.5)

    def temp_at(self, gpu: int, t: float) -> float:
        if self.scenario == "throttle":
            return 86.0 + 1.5 * _noise(self.seed, gpu, int(t))
        return 33.0 + 32.0 * self.power_at(gpu, t) / self.power_limit_w + _noise(self.seed, gpu, int(t))
