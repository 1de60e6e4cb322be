"""Readings from NVML (``pynvml`` or ``SimulatedGPUs``): lifecycle, due reads, buffer drains,
processes. Parts: ``nvml_gateway`` (calls, failures), ``nvml_reads`` (the table, probing, XIDs)."""

from __future__ import annotations

import contextlib
import logging
import math
from collections import Counter

import numpy as np

from ..errors import NVMLUnavailableError
from ..metrics import BY_NAME
from ..schedule import drain_every_s
from .base import Batch, Device, DeviceEvent, ProcessInfo, ReadError, Reading
from .nvml_gateway import (
    _NO_MODULE_HINT,
    FatalError,
    NothingNewError,
    NotSupportedError,
    NVMLCallError,
    NVMLGateway,
    TransientError,
    unavailable,
)
from .nvml_reads import BUFFERED, POLLED, Read, XidWatch, _Device, _gpm_free, _str, listed, mig_devices, probe

log = logging.getLogger("nbgpu")

BUFFER_DEAD_AFTER_S = 10.0
# After a drain found nothing, none for this share of the sample spacing (samples come late).
EMPTY_RETRY_SHARE = 0.25


class NVMLSource:
    """GPUs read through NVML (real or simulated)."""

    def __init__(self, nvml=None) -> None:
        self._nvml = nvml
        self.simulated = bool(getattr(nvml, "SIMULATED", False))
        self.kind = "sim" if self.simulated else "nvml"
        self._gw: NVMLGateway | None = None
        self._devices: list[_Device] = []
        self._opened = False
        self.driver_version = ""
        # The latest process lists per device: a snapshot, replaced whole, never mutated.
        self.processes: dict[object, list[ProcessInfo]] = {}
        self._pid_names: dict[int, tuple[str | None, str | None]] = {}
        self._pcie_turn = 0
        self._selected: set | None = None  # device keys to read; None reads all
        self._ts_offset_us: float | None = None
        self._xid: XidWatch | None = None  # NVML's XID events, polled at each tick

    # -- lifecycle -------------------------------------------------------------------
    def open(self) -> None:
        """Initialise NVML (paired with ``close``) and probe every device once."""
        self.open_listing()
        if all(d.probed for d in self._devices):
            return
        # Probing asks only calls whose failure means "not known" or "try again": it cannot fail.
        cards = [d for d in self._devices if d.parent is None]
        self._devices = [d for card in cards for d in (probe(self._gw, card), *mig_devices(self._gw, card))]
        self._xid = XidWatch(self._gw, cards)

    def open_listing(self) -> None:
        """Initialise NVML and list the GPUs (names, driver) without probing; ``open`` probes later."""
        if self._opened:
            return
        if self._nvml is None:
            try:
                import pynvml
            except ImportError as exc:
                raise NVMLUnavailableError(
                    "NVML is not available (the `pynvml` module of nvidia-ml-py is not "
                    f"installed); {_NO_MODULE_HINT}, or use source='sim'.",
                    hint=_NO_MODULE_HINT) from exc
            self._nvml = pynvml
        g = self._gw = NVMLGateway(self._nvml)
        self._devices, self.processes = [], {}
        try:
            g.call("nvmlInit")
        except NVMLCallError as exc:
            raise unavailable(exc, "nvmlInit failed") from exc.__cause__
        try:
            count = g.call("nvmlDeviceGetCount")
            if count == 0:
                raise unavailable(None, "the driver reports no GPU")
            self.driver_version = _str(g.maybe("nvmlSystemGetDriverVersion") or "")
            for index in range(count):
                handle = g.call("nvmlDeviceGetHandleByIndex", index)
                self._devices.append(listed(g, index, handle, None, self.simulated))
        except (NVMLUnavailableError, NVMLCallError) as exc:
            self._release()  # free what was taken, drop NVML's reference
            self._devices = []
            if isinstance(exc, NVMLUnavailableError):
                raise
            raise unavailable(exc, "listing GPUs failed") from exc.__cause__
        self._opened = True

    def close(self) -> None:
        """Free GPM samples and release our NVML reference; ``devices()`` still describes them."""
        if self._opened:
            self._opened = False
            self._release()

    def _release(self) -> None:
        for dev in self._devices:
            _gpm_free(self._gw, dev)
        if self._xid is not None:
            self._xid.free()
        with contextlib.suppress(NVMLCallError):  # already shut down by someone else: nothing to undo
            self._gw.call("nvmlShutdown")

    def describe(self) -> str:
        cards = [d for d in self._devices if d.parent is None]
        names = Counter(d.info["name"] for d in cards)
        gpus = ", ".join(f"{n}× {name}" if n > 1 else name for name, n in names.items())
        label = "simulated GPUs" if self.simulated else "GPU" + ("s" if len(cards) != 1 else "")
        return f"{len(cards)} {label}: {gpus} (driver {self.driver_version})"

    def select(self, keys: set) -> None:
        """Read only the devices with these keys from now on (the sampler's ``gpus=``)."""
        self._selected = set(keys)

    def simulated_host(self, t: float) -> dict[str, float] | None:
        """Host readings a simulated scenario implies at ``t`` s after start; None for real GPUs."""
        fn = getattr(self._nvml, "simulated_host", None) if self.simulated else None
        return fn(t) if fn is not None else None

    def period_s(self, metric: str) -> float | None:
        """Drain period of a buffered ``metric`` while watched; None for one read every tick."""
        return next((drain_every_s(name, watched=True) for name, row in BUFFERED.items()
                     if metric in row.metrics), None)

    def drained_until(self, key: object, metric: str | None = None) -> float:
        """Clock time up to which GPU ``key``'s sample buffers (or ``metric``'s) are read, less
        one sample spacing (samples come late); inf when nothing is pending."""
        dev = next((d for d in self._devices if d.key == key), None)
        if dev is None or dev.lost or not dev.buffers:
            return math.inf
        return min((dev.complete_at.get(stream, -math.inf) - dev.spacing_us.get(stream, 0.0) / 1e6
                    for stream in dev.buffers
                    if metric is None or metric in BUFFERED[stream].metrics), default=math.inf)

    def _live(self) -> list[_Device]:
        keys = self._selected
        return [d for d in self._devices if not d.lost and (keys is None or d.key in keys)]

    def devices(self) -> list[Device]:
        return [Device(metrics=tuple(sorted(d.caps & set(BY_NAME))), **d.info) for d in self._devices]

    def streams(self) -> dict[object, dict[str, dict[str, np.dtype]]]:
        out: dict[object, dict[str, dict[str, np.dtype]]] = {}
        for d in self._devices:
            # Buffered metrics also get a tick column: the fallback if a buffer stays empty.
            per = {"tick": {m: BY_NAME[m].dtype for m in sorted(d.caps) if m in BY_NAME}}
            if "mem_used_bytes" in d.caps:
                per["memory"] = {"mem_used_bytes": BY_NAME["mem_used_bytes"].dtype}
            out[d.key] = per | {s: {(m := BUFFERED[s].metrics[0]): BY_NAME[m].dtype} for s in d.buffers}
        return out

    # -- reading -------------------------------------------------------------------------
    def read(self, now: float, due: frozenset[str]) -> Reading:
        """New readings of every live device; never raises for a device's failure."""
        reading = Reading()
        procs: dict[object, list[ProcessInfo]] = {}
        for dev in self._live():
            try:
                self._read_device(dev, now, due, reading)
                if "procs" in due:
                    procs[dev.key] = self._read_processes(dev, reading)
            except FatalError as exc:
                dev.lost = True
                _gpm_free(self._gw, dev)
                reading.events.append(DeviceEvent(dev.key, "lost", f"GPU {dev.key} was lost: {exc.text}"))
        if procs:  # one new snapshot, swapped in whole: readers never see it change
            self.processes = {**self.processes, **procs}
            listed = {p.pid for ps in self.processes.values() for p in ps}
            self._pid_names = {pid: v for pid, v in self._pid_names.items() if pid in listed}
        if "pcie" in due:
            self._pcie_turn += 1
        if "tick" in due and self._xid is not None:
            reading.events.extend(e for e in self._xid.poll()
                                  if self._selected is None or e.device in self._selected)
        return reading

    def _wanted(self, dev: _Device, row: Read, due: frozenset[str]) -> bool:
        if dev.caps.isdisjoint(row.metrics):
            return False
        if row.tier == "tick":  # not polled where its sample buffers give it
            drained = {"power": {"power"}, "util": {"util", "memutil"}}.get(row.name)
            return "tick" in due and not (drained and drained <= dev.buffers.keys())
        if row.tier == "memory":  # the fast-memory lane, and a capture's edge
            return ("memory" in due or "edge" in due) and "tick" not in due
        if row.tier == "pcie":
            return "pcie" in due and self._pcie_due(dev)
        return row.tier in due

    def _read_device(self, dev: _Device, now: float, due: frozenset[str], reading: Reading) -> None:
        rows: dict[str, dict[str, float]] = {"tick": {}, "memory": {}}
        for row in POLLED:
            if self._wanted(dev, row, due):
                rows["memory" if row.tier == "memory" else "tick"].update(self._run(dev, row, reading))
        reading.batches += [Batch(dev.key, stream, now, values) for stream, values in rows.items() if values]
        for stream in list(dev.buffers):
            every_s = drain_every_s(stream, watched="live" in due)
            if now - dev.drained_at.get(stream, -np.inf) < every_s - 0.05 and "edge" not in due:
                continue
            if self._nothing_new_yet(dev, stream, now):
                dev.complete_at[stream] = now  # no sample stamped before now is left to read
                continue
            dev.drained_at[stream] = now
            if (batch := self._drain(dev, BUFFERED[stream], now, reading)) is not None:
                reading.batches.append(batch)

    def _run(self, dev: _Device, row: Read, reading: Reading) -> dict[str, float]:
        """One read of the table through the gateway: values, or {} with the failure recorded."""
        try:
            values = row.reader(self._gw, dev)
            dev.unconfirmed.discard(row.name)
            return values
        except NotSupportedError as exc:
            gone = tuple(sorted(set(row.metrics) & dev.caps))
            dev.caps.difference_update(row.metrics)
            if row.name == "gpm":
                _gpm_free(self._gw, dev)
            late = row.name in dev.unconfirmed  # its probe, made late: never supported here
            dev.unconfirmed.discard(row.name)
            message = f"GPU {dev.key}: {row.name} is {'not' if late else 'no longer'} supported ({exc.text})"
            self._gw.log_once(logging.DEBUG if late else logging.WARNING, (dev.key, row.name, "unsupported"),
                              message)
            reading.events.append(DeviceEvent(dev.key, "unsupported", message, gone))
        except (TransientError, NothingNewError) as exc:
            self._transient(dev, row.name, exc, reading, row.metrics)
        return {}

    def _transient(self, dev: _Device, read: str, exc: NVMLCallError, reading: Reading,
                   metrics: tuple[str, ...] = ()) -> None:
        reading.errors.append(ReadError(dev.key, read, exc.text, metrics))
        self._gw.log_once(logging.WARNING, (dev.key, read, exc.code), f"GPU {dev.key} {read}: {exc.text}")

    def _pcie_due(self, dev: _Device) -> bool:
        """PCIe reads sleep ~20 ms inside NVML: one GPU per due round, in turn."""
        full = [d for d in self._live() if "pcie_rx_bytes_per_s" in d.caps]
        return bool(full) and full[self._pcie_turn % len(full)] is dev

    def _drain(self, dev: _Device, row: Read, now: float, reading: Reading) -> Batch | None:
        """Samples NVML buffered since the last drain, at the card's own resolution."""
        stream, metric = row.name, row.metrics[0]
        try:
            ts, vals = self._gw.samples(dev.handle, row.buffer, dev.buffers[stream])
        except NotSupportedError:  # no buffer on this card after all: poll this metric instead
            del dev.buffers[stream]
            return None
        except NothingNewError:
            ts = vals = np.empty(0)
        except TransientError as exc:
            self._transient(dev, f"{stream} samples", exc, reading, row.metrics)
            return None
        dev.complete_at[stream] = now  # every sample stamped before now is read (or none was new)
        if not len(ts):
            # "Not found" means nothing new; a buffer empty for long is treated as absent.
            if stream in dev.spacing_us:
                dev.retry_at[stream] = now + EMPTY_RETRY_SHARE * dev.spacing_us[stream] / 1e6
            if now - dev.empty_since.setdefault(stream, now) > BUFFER_DEAD_AFTER_S:
                del dev.buffers[stream]
                self._gw.log_once(logging.WARNING, (dev.key, stream, "empty"),
                                  f"GPU {dev.key}: NVML {stream} sample buffer stays empty; polling instead")
            return None
        dev.empty_since.pop(stream, None)
        order = np.argsort(ts, kind="stable")
        fresh = order[ts[order] > dev.buffers[stream]]
        ts, vals = ts[fresh], vals[fresh]
        if not len(ts):
            return None
        if len(ts) > 1:  # samples come evenly spaced: their mean spacing is the period
            dev.spacing_us[stream] = float(ts[-1] - ts[0]) / (len(ts) - 1)
        dev.buffers[stream] = int(ts[-1])
        if self._ts_offset_us is None:
            # NVML stamps samples in µs of the CPU clock; guard against a different epoch.
            skew = now * 1e6 - ts[-1]
            self._ts_offset_us = skew if abs(skew) > 30e6 else 0.0
        times = (ts + self._ts_offset_us) / 1e6
        return Batch(dev.key, stream, times, {metric: vals * row.scale})

    def _nothing_new_yet(self, dev: _Device, stream: str, now: float) -> bool:
        """Whether the buffer cannot hold a sample newer than the last one drained yet."""
        spacing = dev.spacing_us.get(stream)
        if spacing is None or self._ts_offset_us is None or not dev.buffers.get(stream):
            return False
        if now < dev.retry_at.get(stream, -np.inf):
            return True
        return now * 1e6 - self._ts_offset_us < dev.buffers[stream] + spacing

    def _read_processes(self, dev: _Device, reading: Reading) -> list[ProcessInfo]:
        """Compute and graphics processes on ``dev``, with name and user where visible here."""
        found: dict[int, int | None] = {}
        for function in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs = self._gw.call(function, dev.handle)
            except NotSupportedError:
                continue
            except (TransientError, NothingNewError) as exc:
                self._transient(dev, "procs", exc, reading)
                return list(self.processes.get(dev.key, ()))
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)
                found[int(p.pid)] = int(used) if isinstance(used, int) else None
        return [ProcessInfo(pid, used, *self._who(pid)) for pid, used in found.items()]

    def _who(self, pid: int) -> tuple[str | None, str | None]:
        """(name, user) of a PID visible in this PID namespace, else (None, None)."""
        hook = getattr(self._nvml, "simulated_process", None) if self.simulated else None
        if hook is not None and (known := hook(pid)) is not None:
            return known
        if pid not in self._pid_names:
            try:
                import psutil

                proc = psutil.Process(pid)
                self._pid_names[pid] = (proc.name(), proc.username())
            except Exception:  # not in this PID namespace, gone, or not ours to look at
                self._pid_names[pid] = (None, None)
        return self._pid_names[pid]
