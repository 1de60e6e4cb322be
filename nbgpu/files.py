"""Writing timelines to files: CSV, JSON lines and Parquet, always atomically.

A file is written beside its destination and renamed over it only when complete, so an
export that fails half-way never leaves a truncated file where a good one was.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .errors import NbgpuError

if TYPE_CHECKING:
    import pandas as pd

# The record keys of the widely copied monitoring script, from nbgpu's columns.
LEGACY_KEYS = {
    "gpu_util_percent": ("util_pct", 1.0),
    "memory_used_gb": ("mem_used_bytes", 1e-9),
    "memory_total_gb": ("mem_total_bytes", 1e-9),
    "memory_util_percent": ("mem_util_pct", 1.0),
    "temperature_c": ("temp_c", 1.0),
    "power_w": ("power_w", 1.0),
}


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """Yield a temporary path beside ``path``; move it over ``path`` only on success."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise NbgpuError(f"cannot write {path}: folder {folder} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=".nbgpu-", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_csv(df: pd.DataFrame, path: str) -> str:
    with atomic_path(path) as tmp:
        out = df.copy()
        out["time"] = out["time"].map(lambda t: t.isoformat())
        out.to_csv(tmp, index=False)
    return path


def _clean(v: object) -> object:
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):
        v = v.item()
        if isinstance(v, float) and math.isnan(v):
            return None
    return v


def jsonl_records(df: pd.DataFrame, filled: bool = True) -> Iterator[dict]:
    """JSON-ready dicts: ``timestamp``, ``gpu_id``, the script's keys, then nbgpu's columns."""
    if filled and len(df):
        df = df.copy()
        value_cols = [c for c in df.columns if c not in ("time", "gpu", "decimated")]
        df[value_cols] = df.groupby("gpu", sort=False)[value_cols].ffill()
    for row in df.to_dict("records"):
        rec = {"timestamp": row["time"].isoformat(), "gpu_id": _clean(row["gpu"])}
        for key, (col, scale) in LEGACY_KEYS.items():
            if col in row:
                v = _clean(row[col])
                rec[key] = None if v is None else round(v * scale, 6)
        for col, v in row.items():
            if col not in ("time", "gpu"):
                rec[col] = _clean(v)
        yield rec


def write_jsonl(df: pd.DataFrame, path: str, filled: bool = True) -> str:
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        for rec in jsonl_records(df, filled=filled):
            fh.write(json.dumps(rec, allow_nan=False) + "\n")
    return path


def write_parquet(df: pd.DataFrame, path: str) -> str:
    try:
        import pyarrow  # noqa: F401
    except ImportError as exc:
        raise NbgpuError("to_parquet needs pyarrow; run `pip install pyarrow`, or use "
                         "to_csv / to_jsonl") from exc
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False)
    return path
