"""One device's readings around a block, as the summary reads them: merged, NaN-free series."""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..metrics import BY_NAME
from ..store import merge_series

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

Part = tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]


class Readings:
    """One device's readings near [a, b], from a store or a frame; ``series`` slices them."""

    def __init__(self, parts: list[Part], merged: dict[str, tuple[np.ndarray, np.ndarray]] | None = None,
                 block: tuple[float, float, bool] | None = None, source: tuple | None = None) -> None:
        self.streams = parts
        self._block = block  # (t0, t1, whether [t0, t1] holds buckets), known from the read
        self._source = source  # (timeline, gpu) to ask about other ranges
        self._merged: dict[str, tuple[np.ndarray, np.ndarray]] = dict(merged or {})
        self._coarse = [p for p in parts if p[2].any()]  # streams holding 10 s buckets
        self.has_maxima = any(c.endswith(MAX_SUFFIXES) for _, cols, _ in parts for c in cols)

    @classmethod
    def of_timeline(cls, full: Timeline, gpu: object, a: float, b: float) -> Readings:
        store = full.store
        return cls([store.read_stream(gpu, s, a, b) for s in store.streams_of(gpu)])

    @classmethod
    def of_frame(cls, df: pd.DataFrame, times: np.ndarray) -> Readings:
        cols = {c: df[c].to_numpy(dtype=np.float64, na_value=np.nan) for c in df.columns
                if c in BY_NAME or c.endswith(MAX_SUFFIXES)}
        dec = (df["decimated"].fillna(False).to_numpy(dtype=bool) if "decimated" in df.columns
               else np.zeros(len(df), dtype=bool))
        order = np.argsort(times, kind="stable")
        return cls([(times[order], {k: v[order] for k, v in cols.items()}, dec[order])])

    def merged(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of ``metric`` over all it was read for, NaN dropped; merged once."""
        merged = self._merged.get(metric)
        if merged is None:
            parts_t, parts_v = [], []
            for t, cols, _ in self.streams:
                col = cols.get(metric)
                if col is None:
                    continue
                v = col.astype(np.float64, copy=False)
                ok = v == v  # not NaN
                parts_t.append(t[ok])
                parts_v.append(v[ok])
            merged = self._merged[metric] = merge_series(parts_t, parts_v)
        return merged

    def series(self, metric: str, a: float = -math.inf, b: float = math.inf) -> tuple[np.ndarray, np.ndarray]:
        """(times, values) of ``metric`` in [a, b], NaN dropped, sorted by time."""
        t, v = self.merged(metric)
        i, j = int(t.searchsorted(a, "left")), int(t.searchsorted(b, "right"))
        return t[i:j], v[i:j]

    def decimated(self, a: float, b: float) -> bool:
        """Whether any row in [a, b] is a bucket of the store's coarse history."""
        if self._block is not None and self._block[:2] == (a, b):
            return self._block[2]
        if self._source is not None:
            full, gpu = self._source
            return any(full.store.read_stream(gpu, s, a, b)[2].any() for s in full.store.streams_of(gpu))
        return any(bool(d[(t >= a) & (t <= b)].any()) for t, _, d in self._coarse)


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
    """``Readings.of_timeline(full, g, a, b)`` of each of ``gpus``, read in one pass."""
    store = full.store
    plans = [(g, _witnesses(store, g)) for g in gpus]
    pairs = [(g, m) for g in gpus for m in SUMMARY_METRICS]
    lengths, times, values, _ = store.series_packed(pairs, a, b)
    seen = [(g, w) for g, wit in plans for _, w in wit if w is not None]
    wl, _, _, _ = store.series_packed(seen, t0 - WITNESS_S, t0, coarse=False)
    witnessed = {pair for pair, n in zip(seen, wl.tolist(), strict=True) if n}
    ends = np.cumsum(lengths).tolist()
    out, k = [], 0
    for g, wit in plans:
        merged = {}
        for m in SUMMARY_METRICS:
            lo, hi = ends[k - 1] if k else 0, ends[k]
            merged[m] = (times[lo:hi], values[lo:hi])
            k += 1
        bucketed = any((g, w) not in witnessed and store.read_stream(g, s, t0, t1)[2].any()
                       for s, w in wit)
        out.append(Readings([], merged, block=(t0, t1, bucketed), source=(full, g)))
    return out
