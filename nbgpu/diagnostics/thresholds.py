"""Every number the diagnostics rules compare against, in one documented dataclass; the defaults
follow rules of thumb for GPU training. Change any with ``Sampler(thresholds={...})``."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field

from ..errors import BadArgumentError, FileError

RULES = ("oom_risk", "memory_leak", "input_bound", "launch_bound", "sync_bound", "idle", "imbalance",
         "throttling", "busy_thin")


def _t(default: object, help: str):
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class Thresholds:
    """Thresholds and time windows of the diagnostics rules (see ``Thresholds.table()``)."""

    eval_every_s: float = _t(2.0, "seconds between two evaluations of the rules (in the sampler thread)")
    clear_after_s: float = _t(10.0, "an alert ends only after its condition has been false this long")
    stale_after_s: float = _t(5.0, "readings older than this are ignored (a lost or stopped GPU)")
    disabled: tuple = _t((), f"rules to switch off, any of: {', '.join(RULES)}")

    oom_warning_fraction: float = _t(0.90, "memory used / total above which OOM risk is a warning")
    oom_warning_after_s: float = _t(2.0, "how long memory must stay above the warning level")
    oom_critical_fraction: float = _t(0.95, "memory used / total above which OOM risk is critical")
    oom_critical_after_s: float = _t(10.0, "how long memory must stay above the critical level")

    leak_windows_s: tuple = _t((15.0, 120.0, 600.0),
                               "windows (s) in which memory rising steadily counts as a leak")
    leak_segments: int = _t(4, "a window is cut in this many parts; each must be higher than the last")
    leak_min_rate_bytes_per_min: float = _t(100e6, "slowest growth (bytes per minute) reported as a leak")
    leak_min_growth_bytes: float = _t(256e6, "smallest total rise (bytes) in a window reported as a leak")
    leak_marks: int = _t(4, "memory must rise at each of this many consecutive marks (epochs)")
    leak_min_per_mark_bytes: float = _t(64e6, "smallest mean rise per mark (bytes) reported as a leak")

    input_window_s: float = _t(10.0, "window (s) for the input-, launch- and sync-bound rules")
    input_util_below_pct: float = _t(50.0, "mean utilisation below this may mean the GPU is starved")
    input_min_util_pct: float = _t(5.0, "mean utilisation above this means the GPU is in use at all")
    input_cpu_busy_pct: float = _t(80.0, "CPU of this kernel and its children (% of one core) that "
                                         "counts as busy")

    split_min_share: float = _t(0.4, "share of the main thread's time (its stack samples over the input "
                                     "window) that holds it: in the data loader for input-bound, issuing "
                                     "GPU work for launch-bound, waiting for the GPU for sync-bound")
    sync_util_below_pct: float = _t(75.0, "mean utilisation below this while the main thread waits for the "
                                          "GPU counts as sync-bound (the waits cost the GPU work)")
    sync_wait_below_share: float = _t(0.9, "share of the main thread's time waiting for the GPU below which "
                                           "it is sync-bound (at or above it, it has nothing else to do: "
                                           "the GPU itself is the bottleneck)")

    idle_window_s: float = _t(10.0, "window (s) for the idle rule")
    idle_util_below_pct: float = _t(10.0, "mean utilisation below this counts as idle")
    idle_cpu_below_pct: float = _t(20.0, "CPU of this kernel (% of one core) below this counts as idle")
    idle_only_in_cell: bool = _t(True, "raise idle only while a cell (or capture) is running")

    imbalance_window_s: float = _t(15.0, "window (s) over which mean utilisations are compared")
    imbalance_gap_pct: float = _t(20.0, "points of mean utilisation between GPUs that count as imbalance "
                                          "(in each third of the window)")

    throttle_window_s: float = _t(10.0, "window (s) for the throttling rule")
    throttle_min_share: float = _t(0.5, "share of readings with a throttle reason that counts")
    throttle_temp_margin_c: float = _t(5.0, "within this many °C of the card's slowdown temperature")
    throttle_power_fraction: float = _t(0.97, "power above this share of the limit counts as pinned")
    throttle_power_share: float = _t(0.8, "share of power readings that must be pinned")

    thin_window_s: float = _t(10.0, "window (s) for the busy-but-thin rule (needs GPM, Hopper+)")
    thin_util_above_pct: float = _t(70.0, "mean utilisation above this counts as busy")
    thin_sm_active_below_pct: float = _t(40.0, "mean SM activity below this counts as thin")
    thin_occupancy_below_pct: float = _t(3.0, "mean SM occupancy below this counts as thin")

    def __post_init__(self) -> None:
        disabled = (self.disabled,) if isinstance(self.disabled, str) else tuple(self.disabled)
        object.__setattr__(self, "disabled", disabled)
        object.__setattr__(self, "leak_windows_s", tuple(float(v) for v in self.leak_windows_s))
        if unknown := [r for r in disabled if r not in RULES]:
            raise BadArgumentError(f"unknown rule(s) in disabled: {', '.join(map(str, unknown))}; "
                                   f"choose from {', '.join(RULES)}")
        if not self.leak_windows_s or not all(math.isfinite(v) and v > 0 for v in self.leak_windows_s):
            raise BadArgumentError("leak_windows_s must be positive numbers of seconds")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(f.default, bool) and not isinstance(value, bool):
                raise BadArgumentError(f"{f.name} must be True or False, got {value!r}")
            if not isinstance(f.default, (bool, tuple)) and (isinstance(value, bool) or not isinstance(
                    value, (int, float)) or not (math.isfinite(value) and value >= 0)):
                raise BadArgumentError(f"threshold {f.name} must be a number >= 0, got {value!r}")
        if self.leak_segments < 2 or self.leak_marks < 2:
            raise BadArgumentError("leak_segments and leak_marks must be at least 2")

    @classmethod
    def from_any(cls, value: object) -> Thresholds:
        """Thresholds from None (defaults), a Thresholds, a dict of the fields to change, or the
        path of a JSON file holding that dict (``NbGpu.thresholds_file``)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, (str, os.PathLike)):  # one-line errors naming the file
            why = "it must hold a JSON object of threshold names and values"
            try:
                with open(value, encoding="utf-8") as f:
                    doc = json.load(f)
            except OSError as exc:
                doc, why = None, exc.strerror
            except ValueError as exc:
                doc, why = None, f"not JSON ({exc})"
            if not isinstance(doc, dict):
                raise FileError(f"cannot read thresholds from {value}: {why}", path=value) from None
            try:
                return cls.from_any(doc)
            except BadArgumentError as exc:  # a bad name or value in the file: say which file
                raise BadArgumentError(f"{value}: {exc}") from None
        if value is None or isinstance(value, dict):
            if unknown := sorted(set(value or {}) - {f.name for f in dataclasses.fields(cls)}):
                raise BadArgumentError(f"unknown threshold(s) {', '.join(unknown)}; see "
                                       "nbgpu.Thresholds.table() for the names")
            return cls(**(value or {}))
        raise BadArgumentError("thresholds must be a dict, nbgpu.Thresholds or a JSON file's path, "
                               f"got {type(value).__name__}")

    @classmethod
    def table(cls) -> list[dict]:
        """One row per threshold: name, default and what it means (for docs and help)."""
        return [{"name": f.name, "default": f.default, "help": f.metadata["help"]}
                for f in dataclasses.fields(cls)]
