"""Every user-facing default in one traitlets Configurable, ``NbGpu``: set by ``%config NbGpu.x``,
``ipython_config.py`` or ``NBGPU_*`` variables, read through ``settings()``."""

from __future__ import annotations

import math
import numbers
import os

from traitlets import Bool, CFloat, CInt, Enum, TraitError, Unicode, validate
from traitlets.config import Configurable

from .errors import BadArgumentError

MIN_INTERVAL_S = 0.01  # faster polling costs a core and floods the store (issue: 1e-9 s)
MAX_INTERVAL_S = 3600.0
MIN_WINDOW_S, MAX_WINDOW_S = 5.0, 86400.0  # what the live panel may show


def check_seconds(value: object, name: str, lo: float, hi: float, why: str = "") -> float:
    """``value`` as seconds from ``lo`` to ``hi``, or BadArgumentError saying what is allowed."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value)
            or not lo <= float(value) <= hi):
        raise BadArgumentError(f"{name} must be a number of seconds from {lo:g} to {hi:g}, "
                               f"got {value!r}{why}")
    return float(value)


def check_interval(interval: object, name: str = "interval") -> float:
    """Seconds between sampler ticks (10 ms to 3600 s), or BadArgumentError saying why not."""
    small = (isinstance(interval, numbers.Real) and not isinstance(interval, bool)
             and 0 < interval < MIN_INTERVAL_S)
    why = (f": below {MIN_INTERVAL_S * 1000:g} ms the sampler would use a whole CPU core; power and "
           "utilisation keep NVML's native resolution at any interval") if small else ""
    return check_seconds(interval, name, MIN_INTERVAL_S, MAX_INTERVAL_S, why)


def check_window(window_s: object, name: str = "window") -> float:
    """Seconds of history the live panel shows: 5 s to 24 h."""
    return check_seconds(window_s, name, MIN_WINDOW_S, MAX_WINDOW_S)


# Environment variables that map onto traits (read once, when the object is made).
ENV = {"NBGPU_INTERVAL": "interval", "NBGPU_WINDOW_S": "window_s", "NBGPU_HISTORY_FILE": "history_path",
       "NBGPU_PRICE_PER_KWH": "price_per_kwh", "NBGPU_CURRENCY": "currency",
       "NBGPU_CARBON_G_PER_KWH": "carbon_g_per_kwh", "NBGPU_FLIGHT_RECORDER": "flight_recorder",
       "NBGPU_EXPORTER_PORT": "exporter_port", "NBGPU_STACK_SAMPLES_HZ": "stack_samples_hz"}


class NbGpu(Configurable):
    """nbgpu's settings; each trait's ``help`` is what ``%config NbGpu`` prints."""

    interval = CFloat(1.0, help="Seconds between sampler ticks (utilisation and power keep "
                      "the card's own resolution between ticks).").tag(config=True)
    window_s = CFloat(60.0, help="Seconds of history the live panel shows.").tag(config=True)
    gpus = Unicode("", help="GPUs to show, e.g. '0,1' or 'MIG-...'; empty: all.").tag(config=True)
    cells = Enum(["off", "on"], "off", help="Profile every cell (the same as "
                 "'%gpumon --cells').").tag(config=True)
    cells_min_s = CFloat(1.0, help="In per-cell mode, cells shorter than this many seconds "
                         "get no summary line (they are still in nbgpu.history()).").tag(config=True)
    thresholds_file = Unicode("", help="A JSON file of diagnostic thresholds "
                              "(see docs/diagnostics.md); empty: the defaults.").tag(config=True)
    history_path = Unicode("", help="Where the history of profiled cells is kept; empty: "
                           "$XDG_DATA_HOME/nbgpu/history.jsonl once keep_history() is "
                           "called.").tag(config=True)
    price_per_kwh = CFloat(None, allow_none=True, help="Price of one kWh, in 'currency'; "
                          "None: cost not shown.").tag(config=True)
    currency = Unicode("", help="Currency code or symbol for 'price_per_kwh'.").tag(config=True)
    carbon_g_per_kwh = CFloat(None, allow_none=True, help="Grams of CO2 per kWh of your grid; "
                             "None: CO2 not shown.").tag(config=True)
    exporter_port = CInt(9464, help="Port of 'nbgpu export' (Prometheus metrics).").tag(config=True)
    flight_recorder = Bool(True, help="Keep a crash-safe record of the last minutes "
                           "under ~/.cache/nbgpu/ to explain a kernel that died.").tag(config=True)
    stack_samples_hz = CInt(8, help="While a profiled cell runs, how often a second the main "
                            "thread's stack is sampled (0: never).").tag(config=True)

    @validate("price_per_kwh", "carbon_g_per_kwh")
    def _check_rate(self, proposal):
        value = proposal["value"]
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise TraitError(f"NbGpu.{proposal['trait'].name} must be a number >= 0, got {value!r}")
        return value

    @validate("interval", "window_s")
    def _check_seconds(self, proposal):
        name = proposal["trait"].name
        check = check_interval if name == "interval" else check_window
        try:
            return check(proposal["value"], f"NbGpu.{name}")
        except BadArgumentError as exc:
            raise TraitError(str(exc)) from None


_instance: NbGpu | None = None


def settings() -> NbGpu:
    """The process's one ``NbGpu``: IPython's configured instance in a kernel, else its own;
    ``NBGPU_*`` variables (``ENV``) are applied when it is made."""
    global _instance
    if _instance is None:
        try:  # the core runs in scripts and CI jobs without the notebook stack
            from IPython import get_ipython
        except ImportError:
            shell = None
        else:
            shell = get_ipython()
        cfg = NbGpu(parent=shell)
        for var, trait in ENV.items():
            if not (raw := os.environ.get(var)):
                continue
            on = raw.strip().lower() not in ("0", "false", "no", "off")
            try:
                setattr(cfg, trait, on if trait == "flight_recorder" else raw)
            except (TraitError, ValueError) as e:
                raise BadArgumentError(f"${var}={raw!r} is not a valid setting ({e}); unset it "
                                       f"or give a valid value") from None
        _instance = cfg
    return _instance


def register(shell) -> NbGpu:
    """Make ``%config NbGpu`` reach the settings object (called by ``%load_ext nbgpu``)."""
    global _instance
    cfg = settings()
    if cfg.parent is not shell:
        # a kernel's %config set before %load_ext lives in shell.config: apply it now
        cfg.update_config(shell.config)
    if cfg not in shell.configurables:
        shell.configurables.append(cfg)
    return cfg


def reset() -> None:
    """Forget the settings object (tests; a new one is made from config and environment)."""
    global _instance
    _instance = None
