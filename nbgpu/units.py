"""How numbers read for people: memory in binary units (GiB/MiB, as nvidia-smi), durations, energy."""

from __future__ import annotations

import math
import numbers

MISSING = "–"
KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4
_BINARY = ((TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB"))


def _ok(v: object) -> bool:
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


def fmt_bytes(n: float | None, signed: bool = False, digits: int = 1) -> str:
    """Bytes in binary units, ``41.2 GiB``, ``310.0 MiB``, ``512 B``; ``signed`` adds ``+``."""
    if not _ok(n):
        return MISSING
    n = float(n)
    sign = "+" if signed and n >= 0 else ""
    for size, unit in _BINARY:
        if abs(n) >= size:
            return f"{sign}{n / size:.{digits}f} {unit}"
    return f"{sign}{n:.0f} B"


def fmt_rate(n: float | None) -> str:
    """Bytes a second in binary units, ``1.2 GiB/s``."""
    text = fmt_bytes(n)
    return text if text == MISSING else f"{text}/s"


def gib(n: float | None, digits: int | None = None) -> str:
    """A byte count as a bare number of GiB (``0.5``, ``9.8``, ``71``), for ``used/total GiB`` pairs."""
    if not _ok(n):
        return MISSING
    g = float(n) / GIB
    places = (1 if abs(g) < 10 else 0) if digits is None else digits
    return f"{g:.{places}f}"


def fmt_used_of(used: float | None, total: float | None) -> str:
    """``40/140`` in GiB (the header names the unit); ``40`` when the total is unknown."""
    if not _ok(used):
        return MISSING
    return f"{gib(used)}/{gib(total)}" if _ok(total) else gib(used)


def fmt_duration(s: float | None) -> str:
    """Seconds as ``3ms``, ``2.04s``, ``12.5s``, ``1m12s``, ``1h03m``."""
    if not _ok(s):
        return MISSING
    s = float(s)
    if 0 < s < 0.01:
        return f"{s * 1e3:.0f}ms"
    if s < 60:
        return f"{s:.2f}s" if s < 10 else f"{s:.1f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def fmt_energy(j: float | None) -> str:
    """Joules as ``920 J``, ``44.1 kJ``, ``1.20 MJ``."""
    if not _ok(j):
        return MISSING
    j = float(j)
    if abs(j) >= 1e6:
        return f"{j / 1e6:.2f} MJ"
    if abs(j) >= 1e3:
        return f"{j / 1e3:.1f} kJ"
    return f"{j:.0f} J"


def fmt_pct(v: float | None, digits: int = 0) -> str:
    """A percentage as ``87 %`` (a space before the unit, as before every other unit)."""
    if not _ok(v):
        return MISSING
    return f"{float(v):.{digits}f} %"


def fmt_watts(w: float | None, digits: int = 0) -> str:
    """Watts as ``612 W``."""
    if not _ok(w):
        return MISSING
    return f"{float(w):.{digits}f} W"


def fmt_celsius(c: float | None) -> str:
    """Degrees Celsius as ``71 °C``."""
    if not _ok(c):
        return MISSING
    return f"{float(c):.0f} °C"
