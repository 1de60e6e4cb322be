"""A read-only view of a store over a time range, as DataFrames and files.

``Timeline`` is what users hold: ``to_pandas()`` gives one row per (time, gpu),
``between(t0, t1)`` narrows the range, and ``to_csv``/``to_jsonl``/``to_parquet`` write it.
Host readings (CPU and RAM of the machine and of this process tree) appear as the
``host_*`` and ``proc_*`` columns on each sampler tick's rows, and alone in ``host()``.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import TYPE_CHECKING

import numpy as np

from .errors import BadArgumentError
from .metrics import BY_NAME, GPU_METRICS, HOST_KEY, HOST_METRICS

if TYPE_CHECKING:
    import pandas as pd

    from .store import Store

TimeLike = "float | datetime.datetime | pandas.Timestamp | str"


def to_epoch(t: object) -> float:
    """Seconds since the epoch from a float, a datetime (naive = UTC), a Timestamp or ISO text."""
    if t is None:
        return math.nan
    if isinstance(t, bool):
        raise BadArgumentError(f"expected a time, got {t!r}")
    if isinstance(t, (int, float, np.floating, np.integer)):
        return float(t)
    if isinstance(t, str):
        try:
            t = _dt.datetime.fromisoformat(t)
        except ValueError as exc:
            raise BadArgumentError(f"not an ISO time: {t!r}") from exc
    if hasattr(t, "tz_localize") and hasattr(t, "value"):  # pandas.Timestamp, ns precision
        return (t if t.tzinfo else t.tz_localize("UTC")).value / 1e9
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        return t.timestamp()
    raise BadArgumentError(f"expected a time (epoch seconds, datetime or ISO text), got {t!r}")


class Timeline:
    """Readings of a sampler between ``t0`` and ``t1`` (epoch seconds; open ends allowed)."""

    def __init__(self, store: Store, devices: list[dict], t0: float = -math.inf,
                 t1: float = math.inf, resolution: str | None = None) -> None:
        self.store = store
        self.devices = devices
        self.t0, self.t1 = t0, t1
        self.resolution = resolution

    def __repr__(self) -> str:
        def fmt(t: float) -> str:
            if not math.isfinite(t):
                return "…"
            return _dt.datetime.fromtimestamp(t, _dt.timezone.utc).isoformat(timespec="milliseconds")
        return f"<nbgpu.Timeline {len(self.devices)} device(s) {fmt(self.t0)} → {fmt(self.t1)}>"

    def between(self, t0: object = None, t1: object = None) -> Timeline:
        """The part of this timeline from ``t0`` to ``t1`` (None: unbounded on that side)."""
        a = self.t0 if t0 is None else max(self.t0, to_epoch(t0))
        b = self.t1 if t1 is None else min(self.t1, to_epoch(t1))
        if a > b:
            raise BadArgumentError("between(t0, t1) needs t0 <= t1")
        return Timeline(self.store, self.devices, a, b, self.resolution)

    # -- raw access for views and summaries ----------------------------------------------
    def series(self, gpu: object, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(epoch seconds, values) of one metric of one GPU in range; missing points dropped."""
        return self.store.series(gpu, metric, self.t0, self.t1)

    def marks(self) -> list[tuple[float, str]]:
        """(time, label) of the marks in range."""
        with self.store.lock:
            events = list(self.store.events)
        return [(e.time, e.label) for e in events if e.kind == "mark" and self.t0 <= e.time <= self.t1]

    def events(self) -> list:
        """All events (marks, lost GPUs, sampler starts/stops) in range."""
        with self.store.lock:
            events = list(self.store.events)
        return [e for e in events if self.t0 <= e.time <= self.t1]

    # -- DataFrames -----------------------------------------------------------------------
    def _device_frame(self, device: object):
        import pandas as pd

        frames = []
        for stream in self.store.streams_of(device):
            t, cols, decimated = self.store.read_stream(device, stream, self.t0, self.t1)
            if not len(t):
                continue
            data = {"time": t}
            data.update({k: v for k, v in cols.items() if not np.isnan(v).all()})
            if decimated.any():
                data["decimated"] = decimated
            frames.append(pd.DataFrame(data))
        if not frames:
            return None
        df = pd.concat(frames, ignore_index=True, sort=False)
        df = df.sort_values("time", kind="stable")
        if df["time"].duplicated().any():
            df = df.groupby("time", sort=True, as_index=False).first()
        return df

    def to_pandas(self, host: bool = True) -> pd.DataFrame:
        """One row per (time, gpu), UTC ``time``; a metric a card lacks is absent or NaN.

        Power and utilisation rows come from NVML's sample buffers at their own times, so
        a row usually carries only some metrics; the other cells are NaN (not zero).
        With ``host``, tick rows also carry ``host_*``/``proc_*`` columns.
        """
        import pandas as pd

        parts = []
        for dev in self.devices:
            df = self._device_frame(dev["index"])
            if df is None:
                continue
            df.insert(1, "gpu", dev["index"])
            parts.append(df)
        order = ["time", "gpu"] + [m.name for m in GPU_METRICS]
        if not parts:
            return pd.DataFrame({c: pd.Series(dtype="float64") for c in order[:2]}).assign(
                time=pd.Series(dtype="datetime64[ns, UTC]"))
        df = pd.concat(parts, ignore_index=True, sort=False)
        if host and HOST_KEY in self.store.devices():
            h = self._device_frame(HOST_KEY)
            if h is not None:
                df = df.merge(h.drop(columns=["decimated"], errors="ignore"), on="time", how="left")
        df = df.sort_values(["time", "gpu"] if df["gpu"].map(type).nunique() == 1 else ["time"],
                            kind="stable").reset_index(drop=True)
        df["time"] = pd.to_datetime(df["time"], unit="s", utc=True)
        known = [c for c in order if c in df.columns]
        rest = [c for c in df.columns if c not in known]
        return df[known + rest]

    def host(self) -> pd.DataFrame:
        """Host CPU/RAM rows alone: machine and this process tree (with child processes)."""
        import pandas as pd

        h = self._device_frame(HOST_KEY) if HOST_KEY in self.store.devices() else None
        if h is None:
            return pd.DataFrame(columns=["time"] + [m.name for m in HOST_METRICS])
        h["time"] = pd.to_datetime(h["time"], unit="s", utc=True)
        return h.reset_index(drop=True)

    # -- files --------------------------------------------------------------------------------
    def to_csv(self, path: str) -> str:
        """Write ``to_pandas()`` as CSV (ISO UTC times), atomically; returns the path."""
        from .files import write_csv

        return write_csv(self.to_pandas(), path)

    def to_jsonl(self, path: str, filled: bool = True) -> str:
        """Write JSON lines with the monitoring script's keys plus nbgpu's; atomically.

        With ``filled`` each record carries the latest known value of every metric of its
        GPU (as a polling script would log), so old log readers keep working.
        """
        from .files import write_jsonl

        return write_jsonl(self.to_pandas(), path, filled=filled)

    def to_parquet(self, path: str) -> str:
        """Write ``to_pandas()`` as Parquet (needs pyarrow), atomically; returns the path."""
        from .files import write_parquet

        return write_parquet(self.to_pandas(), path)


def metric_unit(name: str) -> str:
    """Unit of a column name ('' for unknown columns)."""
    m = BY_NAME.get(name)
    return m.unit if m else ""
