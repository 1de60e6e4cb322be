"""Writing a sampler's timeline to a file while it grows, so a crash loses about a second."""

from __future__ import annotations

import contextlib
import csv
import os
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from .errors import BadArgumentError, FileError
from .files import LineFile, check_target, iso, json_line, jsonl_record, write_parquet
from .metrics import GPU_METRICS, HOST_KEY, HOST_METRICS
from .runfile import load_run
from .timeline import fold_samples, union_frame

if TYPE_CHECKING:
    from .sampler import Sampler

FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet"}


class Recorder:
    """Appends a sampler's new rows and events to ``path`` (.jsonl, .csv, .parquet) on every
    ``flush()``; ``header``: extra fields of the first JSON line (the command, for instance)."""

    def __init__(self, sampler: Sampler, path: str, header: dict | None = None) -> None:
        self.sampler = sampler
        self.path = os.fspath(path)
        self.format = FORMATS.get(os.path.splitext(self.path)[1].lower(), "")
        if not self.format:
            raise BadArgumentError(f"cannot tell the format of {self.path!r}; "
                                   "end the name in .jsonl, .csv or .parquet")
        check_target(self.path)
        self.journal = self.path + ".partial.jsonl" if self.format == "parquet" else self.path
        self._file = LineFile(self.journal)
        self._marks: dict[tuple[object, str], float] = {}
        self._event_seq = 0  # the store numbers events from 1
        self._alerts_written: set[tuple] = set()
        self._stacks_done = -np.inf  # time of the newest stack sample written
        self._last: dict[object, dict] = {}
        self.rows_written = 0
        self.closed = False
        store = sampler.store
        have = {m for d in sampler.devices for m in store.metrics_of(d.key)}
        self._columns = ["time", "gpu", "name"] + [m.name for m in GPU_METRICS if m.name in have] + (
            [m.name for m in HOST_METRICS] if HOST_KEY in store.devices() else [])
        if self.format == "csv":
            self._file.write(",".join(self._columns))
        else:
            status = sampler.status()
            self._event({"event": "run", "label": "started", "source": status.source_description,
                         "simulated": status.simulated, "interval_s": sampler.interval,
                         "devices": [{"index": d.key, "name": d.name, "uuid": d.uuid, "parent": d.parent,
                                      "mig": d.mig, "host": d.node} for d in sampler.devices],
                         **(header or {})},
                        t=sampler.started_at or time.time())

    def _read_new(self, device: object, stream: str, t1: float) -> tuple[np.ndarray, dict]:
        """Rows of one stream after the newest one written, up to ``t1``; advances the mark."""
        done = self._marks.get((device, stream), -np.inf)
        t, cols, _ = self.sampler.store.read_stream(device, stream, done, t1, coarse=False)
        keep = t > done  # the newest row written is read again
        t, cols = t[keep], {k: v[keep] for k, v in cols.items()}
        if len(t):
            self._marks[(device, stream)] = float(t[-1])
        return t, cols

    def _device_rows(self, device: object, cap: float, final: bool) -> tuple[np.ndarray, dict]:
        """New rows of one GPU: one per sampler tick, buffered samples averaged into their tick."""
        streams = self.sampler.store.streams_of(device)
        if "tick" not in streams:
            df = union_frame([self._read_new(device, s, np.inf) for s in streams])
            if df is None:
                return np.empty(0), {}
            return df["time"].to_numpy(np.float64), {c: df[c].to_numpy(np.float64) for c in df if c != "time"}
        first = (device, "tick") not in self._marks
        t, cols = self._read_new(device, "tick", cap)
        if not len(t):
            return t, cols
        # NVML hands over seconds of samples from before the start: keep one interval's worth.
        floor = t[0] - self.sampler.interval if first else -np.inf
        cols = {k: v.astype(np.float64) for k, v in cols.items()}
        for stream in streams:
            if stream == "tick":
                continue
            bt, bcols = self._read_new(device, stream, np.inf if final else t[-1])
            if len(bt) and bt[-1] > floor:
                fold_samples(cols, t, bt, bcols, after=floor)  # as Timeline's tick rows
        return t, cols

    def _rows(self, final: bool) -> list[tuple[float, object, dict]]:
        """(time, gpu, {column: value}) of everything new, sorted by time."""
        store = self.sampler.store
        has_host = HOST_KEY in store.devices()
        # Host rows are appended last in a tick: capped at the newest, each tick row has its host row.
        cap = np.inf if final or not has_host else store.last(HOST_KEY, "host_ram_total_bytes")[0]
        if not final:  # a tick whose buffered samples are still in NVML's buffer waits for them
            cap = min([cap, *(self.sampler.drained_until(d.key) for d in self.sampler.devices)])
        if cap != cap:
            return []
        host: dict[float, dict] = {}
        if has_host:
            ht, hcols = self._read_new(HOST_KEY, "tick", cap)
            host = {when: {k: float(v[i]) for k, v in hcols.items()} for i, when in enumerate(ht.tolist())}
        out = []
        for dev in self.sampler.devices:
            t, cols = self._device_rows(dev.key, cap, final)
            arrays = {n: v.tolist() for n, v in cols.items()}
            for i, when in enumerate(t.tolist()):
                out.append((when, dev.key, {**{n: a[i] for n, a in arrays.items()}, **host.get(when, {})}))
        out.sort(key=lambda r: r[0])
        return out

    def _write_rows(self, rows: list[tuple[float, object, dict]]) -> None:
        lines = []
        if self.format == "csv":
            writer = csv.writer(SimpleNamespace(write=lines.append), lineterminator="")  # a line a row
            names = {d.key: d.name for d in self.sampler.devices}  # "... (simulated)" says so in CSV
            for when, gpu, row in rows:
                cells = ["" if (v := row.get(c)) is None or v != v else v for c in self._columns[3:]]
                writer.writerow([iso(when), gpu, names.get(gpu, ""), *cells])
        else:
            for when, gpu, row in rows:
                last = self._last.setdefault(gpu, {})
                last.update((key, value) for key, value in row.items() if value == value)  # not NaN
                lines.append(json_line(jsonl_record(iso(when), gpu, last)))
        for line in lines:  # counted line by line: a failed write leaves a true count
            self._file.write(line)
            self.rows_written += 1

    def _event(self, fields: dict, t: float) -> None:
        self._file.write(json_line({"timestamp": iso(t), **fields}))

    def _write_events(self, final: bool) -> None:
        if self.format == "csv":
            return
        for ev in self.sampler.store.events_since(self._event_seq):
            self._event({"event": ev.kind, "label": ev.label, "gpu_id": ev.device}, ev.time)
            self._event_seq = ev.seq
        self._write_stacks()
        for a in self.sampler.alert_list():
            key = (a.rule, a.gpu, a.start)
            if key in self._alerts_written or (a.end is None and not final):
                continue
            self._alerts_written.add(key)
            self._event({"event": "alert", "rule": a.rule, "severity": a.severity, "gpu_id": a.gpu,
                         "start": iso(a.start), "end": None if a.end is None else iso(a.end),
                         "message": a.message, "suggestion": a.suggestion}, a.start)

    def _write_stacks(self) -> None:
        """The main thread's stack samples since the last flush as one line: ``{"event":
        "stacks", "t0": epoch s, "lines": [[line, text], ...], "samples": [[ms after t0,
        category, index in lines or -1], ...]}``."""
        from .diagnostics.stacks import samples_of

        got = samples_of(self.sampler)
        done = self._stacks_done
        new = [r for r in got.records(done, np.inf) if r[0] > done] if got is not None else []
        if not new:
            return
        lines = list(dict.fromkeys((n, text) for _, _, n, text in new if n is not None))
        index = {line: i for i, line in enumerate(lines)}
        t0 = new[0][0]
        self._event({"event": "stacks", "t0": t0, "lines": [list(line) for line in lines],
                     "samples": [[round((t - t0) * 1000.0, 1), c, index.get((n, text), -1)]
                                 for t, c, n, text in new]}, t0)
        self._stacks_done = new[-1][0]

    def flush(self, final: bool = False) -> int:
        """Write what arrived since the last flush and hand it to the OS; returns rows written."""
        if self.closed:
            return 0
        rows = self._rows(final)
        self._write_rows(rows)
        self._write_events(final)
        return len(rows)

    def close(self) -> str:
        """Write the rest (and the Parquet file); returns the path of the finished file."""
        if self.closed:
            return self.path
        try:
            self.flush(final=True)
        finally:
            self.closed = True
            self._file.close()
        if self.format == "parquet":
            run = load_run(self.journal)  # the rows and events the journal holds, as report reads them
            events = [{k: v for k, v in e.items() if k != "time_s"} for e in run.events]
            write_parquet(run.frame, self.path, events=events)
            os.unlink(self.journal)
        return self.path

    def abandon(self) -> None:
        """Stop writing after a failure, keeping what the file holds (the journal for Parquet)."""
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError, FileError):
                self._file.close()

