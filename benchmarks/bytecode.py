"""Which modules a process compiled from source, and bytecode made ahead as an install makes it.

An installed package imports from bytecode: ``pip install`` writes it, and a checkout's first
import writes it to ``__pycache__``. Where writing is off (``PYTHONDONTWRITEBYTECODE``) or
a package was installed with ``--no-compile``, every fresh interpreter compiles those modules
again, and a start-up figure then times the compiler. ``compiled_here`` says which modules
that was, so a start-up result shows it; ``precompile`` writes the measured tree's bytecode
before the runs, as installing it would.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
import struct
import sys
from collections import Counter
from pathlib import Path


def _loaded_from_source(origin: str, cached: str, since_s: float) -> bool:
    """Whether a module from ``origin`` was compiled from source: no bytecode at ``cached``,
    bytecode that does not match the source (timestamp-checked pyc), or bytecode written at
    or after ``since_s`` (epoch seconds), by its import."""
    try:
        with open(cached, "rb") as f:
            header = f.read(16)
        written_s = os.stat(cached).st_mtime
        source = os.stat(origin)
    except OSError:
        return True
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return True
    flags, mtime, size = struct.unpack("<III", header[4:16])
    if flags == 0 and (mtime != int(source.st_mtime) & 0xFFFFFFFF or size != source.st_size & 0xFFFFFFFF):
        return True
    return written_s >= since_s


def compiled_here(since_s: float) -> list[str]:
    """Names of this process's modules that were compiled from source, sorted: those with no
    valid bytecode, and those whose bytecode was written at or after ``since_s`` (when the
    work measured began; its imports wrote it)."""
    out = []
    for name, module in list(sys.modules.items()):
        spec = getattr(module, "__spec__", None)
        origin, cached = getattr(spec, "origin", None), getattr(spec, "cached", None)
        if origin and cached and origin.endswith(".py") and _loaded_from_source(origin, cached, since_s):
            out.append(name)
    return sorted(out)


def by_package(modules: list[str], among: set[str] | None = None) -> dict[str, int]:
    """How many of ``modules`` (those in ``among`` where given) each root package has, most first."""
    roots = Counter(m.split(".")[0] for m in modules if among is None or m in among)
    return dict(roots.most_common())


def precompile(package_dir: Path) -> bool:
    """Write the bytecode of every module under ``package_dir`` where it is missing or stale
    (what ``pip install`` does); False where some could not be written (a read-only tree)."""
    return bool(compileall.compile_dir(str(package_dir), quiet=1))
