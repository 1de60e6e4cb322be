"""A read-only view of a store over a time range, as DataFrames and files."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .errors import BadArgumentError
from .files import iso, write_csv, write_jsonl, write_parquet
from .metrics import GPU_METRICS, HOST_KEY, HOST_METRICS, max_column
from .sources.base import Device

if TYPE_CHECKING:
    import pandas as pd

    from .store import Store

RESOLUTIONS = ("tick", "native")
# A reading sparser than the ticks stands for the ticks after it for this many of its own periods.
HOLD_PERIODS = 3
HOLD_LOOKBACK_S = 60.0  # how far before the range a held reading is looked for
# Columns that count bytes: int64 in frames when every value is known.
COUNT_COLUMNS = ("mem_used_bytes", "mem_total_bytes", "mem_used_max_bytes",
                 "host_ram_used_bytes", "host_ram_total_bytes", "proc_rss_bytes")


def _held(t: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``v`` with NaN cells given the last reading, for up to HOLD_PERIODS of its spacing."""
    ok = ~np.isnan(v)
    if ok.all() or not ok.any():
        return v
    spacing = float(np.median(np.diff(t[ok]))) if ok.sum() > 1 else math.inf
    last = np.maximum.accumulate(np.where(ok, np.arange(len(v)), 0))  # before the first: v[0], NaN
    return np.where(ok | (t - t[last] <= HOLD_PERIODS * spacing), v[last], np.nan)


def fold_samples(data: dict[str, np.ndarray], tick_t: np.ndarray, sample_t: np.ndarray, samples: dict,
                 after: float = -math.inf) -> None:
    """Fold buffered ``samples`` taken after ``after`` into the tick each precedes (the last tick takes
    later ones): each column's mean (NaN skipped) and its max in ``<metric>_max``; a tick that got none
    keeps its own."""
    n, keep = len(tick_t), sample_t > after
    slot = np.minimum(np.searchsorted(tick_t, sample_t[keep], "left"), n - 1)  # (t[i-1], t[i]] -> tick i
    for col, raw in samples.items():
        values = raw[keep].astype(np.float64)
        ok = ~np.isnan(values)
        at, values = slot[ok], values[ok]
        counts = np.bincount(at, minlength=n)
        peaks = np.full(n, np.nan)
        np.fmax.at(peaks, at, values)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.bincount(at, weights=values, minlength=n) / np.maximum(counts, 1)
        own = data.get(col, np.full(n, np.nan))
        data[col], data[max_column(col)] = np.where(counts > 0, mean, own), np.where(counts > 0, peaks, own)


def union_frame(parts: list[tuple[np.ndarray, dict]]) -> pd.DataFrame | None:
    """Rows of several streams of one device, by time: each column's first reading at that time
    (``decimated``: any); None when there are none."""
    import pandas as pd

    frames = [pd.DataFrame({"time": t, **{k: v for k, v in cols.items() if not np.isnan(v).all()}})
              for t, cols in parts if len(t)]
    if not frames:
        return None
    df = pd.concat(frames, ignore_index=True, sort=False).sort_values("time", kind="stable")
    if df["time"].duplicated().any():
        df = df.groupby("time", sort=True, as_index=False).agg(
            {c: ("any" if c == "decimated" else "first") for c in df.columns if c != "time"})
    return df


def _as_counts(df: pd.DataFrame) -> pd.DataFrame:
    for col in COUNT_COLUMNS:
        if col in df.columns and len(df) and df[col].notna().all():
            df[col] = df[col].round().astype("int64")
    return df


def to_epoch(t: object) -> float:
    """Seconds since the epoch from a float, a datetime (naive = UTC), a Timestamp or ISO text."""
    if isinstance(t, numbers.Real) and not isinstance(t, bool):
        return float(t)
    import pandas as pd

    try:
        stamp = pd.Timestamp(t)
    except (TypeError, ValueError):
        stamp = pd.NaT
    if stamp is pd.NaT:
        raise BadArgumentError(f"expected a time (epoch seconds, datetime or ISO text), got {t!r}")
    return (stamp if stamp.tzinfo else stamp.tz_localize("UTC")).value / 1e9


def epoch_seconds(col: pd.Series) -> np.ndarray:
    """Epoch seconds (float64) of a frame's time column: numbers, or datetimes (naive = UTC)."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(col.dtype):
        return col.to_numpy(dtype=np.float64)
    ts = pd.to_datetime(col, utc=True)
    return (ts - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64)


class Timeline:
    """Readings of a sampler between ``t0`` and ``t1`` (epoch seconds; open ends allowed); ``drained(device,
    metric)``: the time up to which that metric's sample buffer reached the store, none after it yet."""

    def __init__(self, store: Store, devices: list[Device], t0: float = -math.inf,
                 t1: float = math.inf, drained: Callable[[object, str], float] | None = None) -> None:
        self.store = store
        self.devices = list(devices)
        self.t0, self.t1 = t0, t1
        self.drained = drained

    def __repr__(self) -> str:
        a, b = (iso(t, "milliseconds") if math.isfinite(t) else "…" for t in (self.t0, self.t1))
        return f"<nbgpu.Timeline {len(self.devices)} device(s) {a} → {b}>"

    def between(self, t0: object = None, t1: object = None) -> Timeline:
        """The part of this timeline from ``t0`` to ``t1`` (None: unbounded on that side)."""
        a = self.t0 if t0 is None else max(self.t0, to_epoch(t0))
        b = self.t1 if t1 is None else min(self.t1, to_epoch(t1))
        if a > b:
            raise BadArgumentError("between(t0, t1) needs t0 <= t1")
        return Timeline(self.store, self.devices, a, b, self.drained)

    def series(self, gpu: object, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(epoch seconds, values) of one metric of one GPU in range; missing points dropped."""
        return self.store.series(gpu, metric, self.t0, self.t1)

    def marks(self) -> list[tuple[float, str]]:
        """(time, label) of the marks in range."""
        return [(e.time, e.label) for e in self.events() if e.kind == "mark"]

    def events(self) -> list:
        """All events (marks, lost GPUs, sampler starts/stops) in range."""
        with self.store.lock:
            events = list(self.store.events)
        return [e for e in events if self.t0 <= e.time <= self.t1]

    def _tick_frame(self, device: object, late: dict[str, float]):
        """One row per tick of ``device``: buffered readings folded into the tick they precede."""
        import pandas as pd

        streams = self.store.streams_of(device)
        if "tick" not in streams:
            return self._device_frame(device)
        tt, tcols, tdec = self.store.read_stream(device, "tick", self.t0 - HOLD_LOOKBACK_S, self.t1)
        if not ((tt >= self.t0) & (tt <= self.t1)).any():
            return None
        first_gap = float(np.median(np.diff(tt))) if len(tt) > 1 else 1.0
        data = {k: v.astype(np.float64) for k, v in tcols.items()}
        pending: dict[str, float] = {}
        for stream in streams:
            if stream == "tick":
                continue
            st, scols, _ = self.store.read_stream(device, stream, tt[0] - first_gap, tt[-1])
            fold_samples(data, tt, st, scols, after=tt[0] - first_gap)
            for col in scols:
                until = self.drained(device, col) if self.drained is not None else math.inf
                if until < tt[-1]:
                    pending[col] = pending[max_column(col)] = until
                    late[col] = min(late.get(col, math.inf), until)
        inside = tt >= self.t0
        data = {k: np.where(tt > pending.get(k, math.inf), np.nan, _held(tt, v))[inside]
                for k, v in data.items()}
        frame = {"time": tt[inside], **{k: v for k, v in data.items() if not np.isnan(v).all()}}
        if tdec[inside].any():
            frame["decimated"] = tdec[inside]
        return pd.DataFrame(frame)

    def _device_frame(self, device: object):
        reads = (self.store.read_stream(device, s, self.t0, self.t1) for s in self.store.streams_of(device))
        return union_frame([(t, {**cols, "decimated": np.asarray(dec, bool)}) for t, cols, dec in reads])

    def to_pandas(self, host: bool = True, resolution: str = "tick") -> pd.DataFrame:
        """One row per (tick, gpu), UTC ``time``, NaN where unknown, ``host`` columns too; "tick" folds
        sample buffers into their tick (mean, ``<metric>_max``; ``attrs["not_drained"]``), "native"
        keeps every reading at its own time (docs/profiles.md)."""
        import pandas as pd

        if resolution not in RESOLUTIONS:
            raise BadArgumentError(f"to_pandas(resolution={resolution!r}): use one of "
                                   f"{', '.join(RESOLUTIONS)}")
        late: dict[str, float] = {}
        parts = []
        for dev in self.devices:
            df = self._tick_frame(dev.key, late) if resolution == "tick" else self._device_frame(dev.key)
            if df is None:
                continue
            df.insert(1, "gpu", dev.key)
            parts.append(df)
        if not parts:
            return pd.DataFrame({"time": pd.Series(dtype="datetime64[ns, UTC]"),
                                 "gpu": pd.Series(dtype="float64")})
        df = pd.concat(parts, ignore_index=True, sort=False)
        h = self._device_frame(HOST_KEY) if host else None  # None: no host rows
        if h is not None:
            df = df.merge(h.drop(columns=["decimated"]), on="time", how="left")
        df = df.sort_values(["time", "gpu"] if df["gpu"].map(type).nunique() == 1 else ["time"],
                            kind="stable").reset_index(drop=True)
        df["time"] = pd.to_datetime(df["time"], unit="s", utc=True)
        rank = {c: i for i, c in enumerate(["time", "gpu"] + [m.name for m in GPU_METRICS])}  # then the rest
        df = _as_counts(df[sorted(df.columns, key=lambda c: rank.get(c, len(rank)))].copy())
        if late:  # say why the newest ticks are NaN there: read again after the next drain
            df.attrs["not_drained"] = {k: pd.Timestamp(v, unit="s", tz="UTC") if math.isfinite(v) else pd.NaT
                                       for k, v in late.items()}
        return df

    def host(self) -> pd.DataFrame:
        """Host CPU/RAM rows alone: machine and this process tree (with child processes)."""
        import pandas as pd

        h = self._device_frame(HOST_KEY)
        if h is None:
            return pd.DataFrame(columns=["time"] + [m.name for m in HOST_METRICS])
        h["time"] = pd.to_datetime(h["time"], unit="s", utc=True)
        return _as_counts(h.reset_index(drop=True))

    def to_csv(self, path: str) -> str:
        """Write ``to_pandas()`` as CSV (ISO UTC times), atomically; returns the path."""
        return write_csv(self.to_pandas(), path)

    def to_jsonl(self, path: str, filled: bool = True) -> str:
        """Write JSON lines with the monitoring script's keys plus nbgpu's, atomically; ``filled``:
        each record carries its GPU's latest value of every metric (as a script logs)."""
        return write_jsonl(self.to_pandas(), path, filled=filled)

    def to_parquet(self, path: str) -> str:
        """Write ``to_pandas()`` as Parquet (needs pyarrow), atomically; returns the path."""
        return write_parquet(self.to_pandas(), path)


