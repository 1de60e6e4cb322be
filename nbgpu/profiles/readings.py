"""One device's readings around a block, as the summary reads them: merged, NaN-free series."""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..metrics import BY_NAME

if TYPE_CHECKING:
    import pandas as pd

    from ..store import Store
    from ..timeline import Timeline

# The metrics a summary reads (``summary._gpu_row``); other metrics are never merged.
SUMMARY_METRICS = ("mem_used_bytes", "util_pct", "power_w", "sm_active_pct", "temp_c", "energy_j",
                   "clock_event_reasons")
MAX_SUFFIXES = ("_max_w", "_max_pct", "_max_bytes")  # a folded frame's per-tick maxima
# How far before the block a stream's reading may lie to show that the block is not bucketed.
WITNESS_S = 15.0

EMPTY = (np.empty(0), np.empty(0))


class Readings:
    """One device's readings near a block [t0, t1]: NaN-free, time-sorted series per metric,
    and whether the block holds 10 s buckets of the store's coarse history."""

    def __init__(self, merged: dict[str, tuple[np.ndarray, np.ndarray]], bucketed: bool) -> None:
        self._merged = merged
        self.bucketed = bucketed
        self.has_maxima = any(c.endswith(MAX_SUFFIXES) for c in merged)

    @classmethod
    def of_frame(cls, df: pd.DataFrame, times: np.ndarray, t0: float, t1: float) -> Readings:
        order = np.argsort(times, kind="stable")
        t, merged = times[order], {}
        for c in df.columns:
            if c in BY_NAME or c.endswith(MAX_SUFFIXES):
                v = df[c].to_numpy(dtype=np.float64, na_value=np.nan)[order]
                merged[c] = (t[v == v], v[v == v])
        dec = (df["decimated"].fillna(False).to_numpy(dtype=bool)[order] if "decimated" in df.columns
               else np.zeros(len(df), dtype=bool))
        return cls(merged, bool(dec[(t >= t0) & (t <= t1)].any()))

    def merged(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of ``metric`` over all it was read for."""
        return self._merged.get(metric, EMPTY)

    def series(self, metric: str, a: float = -math.inf, b: float = math.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of ``metric`` in [a, b]."""
        t, v = self.merged(metric)
        i, j = int(t.searchsorted(a, "left")), int(t.searchsorted(b, "right"))
        return t[i:j], v[i:j]


# Per store and device: (its streams, (stream, a metric kept in it alone or None) per stream).
_witness_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _witnesses(store: Store, gpu: object) -> list[tuple[str, str | None]]:
    """For each stream of ``gpu``, a metric kept in that stream alone (None: no such metric)."""
    streams = tuple(store.streams_of(gpu))
    per_store = _witness_cache.setdefault(store, {})
    hit = per_store.get(gpu)
    if hit is not None and hit[0] == streams:
        return hit[1]
    columns = {s: list(store.read_stream(gpu, s, math.inf, math.inf)[1]) for s in streams}
    found = []
    for s in streams:
        others = {c for o in streams if o != s for c in columns[o]}
        alone = [c for c in columns[s] if c not in others]
        found.append((s, next((c for c in alone if c in SUMMARY_METRICS), alone[0] if alone else None)))
    per_store[gpu] = (streams, found)
    return found


def timeline_readings(full: Timeline, gpus: list, a: float, b: float, t0: float, t1: float
                      ) -> list[Readings]:
    """The ``Readings`` of each of ``gpus`` over [a, b] for the block [t0, t1], read in one pass."""
    store = full.store
    plans = [(g, _witnesses(store, g)) for g in gpus]
    pairs = [(g, m) for g in gpus for m in SUMMARY_METRICS]
    lengths, times, values, _ = store.series_packed(pairs, a, b)
    seen = [(g, w) for g, wit in plans for _, w in wit if w is not None]
    wl, _, _, _ = store.series_packed(seen, t0 - WITNESS_S, t0, coarse=False)
    witnessed = {pair for pair, n in zip(seen, wl.tolist(), strict=True) if n}
    ends = np.cumsum(lengths)[:-1]
    per_pair = list(zip(np.split(times, ends), np.split(values, ends), strict=True))
    out, n = [], len(SUMMARY_METRICS)
    for i, (g, wit) in enumerate(plans):
        merged = dict(zip(SUMMARY_METRICS, per_pair[i * n:(i + 1) * n], strict=True))
        bucketed = any((g, w) not in witnessed and store.read_stream(g, s, t0, t1)[2].any()
                       for s, w in wit)
        out.append(Readings(merged, bucketed))
    return out
