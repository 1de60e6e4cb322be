"""How numbers read for people: memory in binary units (GiB/MiB, as nvidia-smi), durations, energy."""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable

MISSING = "–"
KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4
BINARY = ((TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB"))


def finite(v: object) -> bool:
    """Whether ``v`` is a finite number (numpy scalars included; text and bools are not)."""
    if isinstance(v, (str, bytes, bool)) or v is None:
        return False
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def as_float(v: object) -> float:
    """``v`` as a float; NaN when it is no number (text, None, a bool)."""
    return float(v) if isinstance(v, numbers.Real) and not isinstance(v, bool) else math.nan


def _number(fmt: Callable[..., str]) -> Callable[..., str]:
    """``fmt`` given a finite number as a float; anything else (None, NaN, text, a bool) reads MISSING."""
    @functools.wraps(fmt)
    def checked(v: object, *args: object, **kwargs: object) -> str:
        return fmt(float(v), *args, **kwargs) if finite(v) else MISSING
    return checked


@_number
def fmt_bytes(n: float | None, signed: bool = False, digits: int = 1) -> str:
    """Bytes in binary units, ``41.2 GiB``, ``310.0 MiB``, ``512 B``; ``signed`` adds ``+``."""
    sign = "+" if signed and n >= 0 else ""
    size, unit = next(((size, unit) for size, unit in BINARY if abs(n) >= size), (1, "B"))
    return f"{sign}{n / size:.{digits if size > 1 else 0}f} {unit}"


@_number
def fmt_rate(n: float | None) -> str:
    """Bytes a second in binary units, ``1.2 GiB/s``."""
    return f"{fmt_bytes(n)}/s"


@_number
def gib(n: float | None, digits: int | None = None) -> str:
    """A byte count as a bare number of GiB (``0.5``, ``9.8``, ``71``), for ``used/total GiB`` pairs."""
    g = n / GIB
    return f"{g:.{(1 if abs(g) < 10 else 0) if digits is None else digits}f}"


def fmt_used_of(used: float | None, total: float | None) -> str:
    """``40/140`` in GiB (the header names the unit); ``40`` when the total is unknown."""
    return f"{gib(used)}/{gib(total)}" if finite(used) and finite(total) else gib(used)


@_number
def fmt_duration(s: float | None) -> str:
    """Seconds as ``3ms``, ``2.04s``, ``12.5s``, ``1m12s``, ``1h03m``."""
    if 0 < s < 0.01:
        return f"{s * 1e3:.0f}ms"
    if s < 60:
        return f"{s:.2f}s" if s < 10 else f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


@_number
def fmt_energy(j: float | None) -> str:
    """Joules as ``920 J``, ``44.1 kJ``, ``1.20 MJ``."""
    if abs(j) >= 1e6:
        return f"{j / 1e6:.2f} MJ"
    return f"{j / 1e3:.1f} kJ" if abs(j) >= 1e3 else f"{j:.0f} J"


@_number
def fmt_pct(v: float | None, digits: int = 0) -> str:
    """A percentage as ``87 %`` (a space before the unit, as before every other unit)."""
    return f"{v:.{digits}f} %"


@_number
def fmt_watts(w: float | None, digits: int = 0) -> str:
    """Watts as ``612 W``."""
    return f"{w:.{digits}f} W"


@_number
def fmt_celsius(c: float | None) -> str:
    """Degrees Celsius as ``71 °C``."""
    return f"{c:.0f} °C"
