"""Probing NVML devices at open: list each (and its MIG slices), its details, which reads it has."""

from __future__ import annotations

import contextlib
import logging

from .nvml_gateway import NothingNewError, NotSupportedError, NVMLCallError
from .nvml_reads import READS, TEMPERATURE_THRESHOLD_SLOWDOWN, Read, _Device, _str

log = logging.getLogger("nbgpu")


class Probing:
    """NVMLSource's probing methods (they use its gateway, ``_gw``, and ``simulated``)."""

    def _maybe(self, function: str, *args):
        """A call whose failure only means "not known" (names, limits at probe time)."""
        try:
            return self._gw.call(function, *args)
        except NVMLCallError:
            return None

    def _listed(self, index: int, handle, parent) -> _Device:
        """A device as listed: key, handle and name; ``_probe`` adds the rest."""
        key = index if parent is None else f"{parent}/{index}"
        info = {"key": key, "parent": parent, "mig": parent is not None,
                "name": _str(self._maybe("nvmlDeviceGetName", handle) or "unknown GPU"),
                "uuid": "", "mem_total_bytes": None, "power_limit_w": None,
                "slowdown_temp_c": None, "simulated": self.simulated}
        return _Device(key=key, handle=handle, parent=parent, info=info)

    def _probe(self, dev: _Device) -> _Device:
        """Fill in a listed device's details and find which reads it has."""
        handle = dev.handle
        mem = self._maybe("nvmlDeviceGetMemoryInfo", handle)
        limit_mw = self._maybe("nvmlDeviceGetEnforcedPowerLimit", handle)
        slowdown = self._maybe("nvmlDeviceGetTemperatureThreshold", handle,
                               TEMPERATURE_THRESHOLD_SLOWDOWN)
        dev.info.update({
            "uuid": _str(self._maybe("nvmlDeviceGetUUID", handle) or ""),
            "mem_total_bytes": int(mem.total) if mem is not None else None,
            "power_limit_w": limit_mw / 1000.0 if limit_mw else None,
            "slowdown_temp_c": float(slowdown) if slowdown else None,
        })
        for row in READS:
            if row.parent_only and dev.parent is not None:
                continue
            if row.probe_at_first_read:
                dev.unconfirmed.add(row.name)
                dev.caps.update(row.metrics)
            elif self._probe_read(dev, row):
                dev.caps.update(row.metrics)
        dev.probed = True
        return dev

    def _probe_read(self, dev: _Device, row: Read) -> bool:
        """Whether ``dev`` has ``row``; a transient failure counts as yes (tried again later)."""
        try:
            if row.buffer is not None:
                with contextlib.suppress(NothingNewError):  # supported, nothing buffered yet
                    self._gw.call("nvmlDeviceGetSamples", dev.handle, row.buffer, 0)
            elif row.reader is not None:
                row.reader(self._gw, dev)
        except NotSupportedError as exc:
            log.debug("GPU %s: %s not available (%s)", dev.key, row.name, exc.text)
            return False
        except NVMLCallError as exc:
            self._gw.log_once(logging.INFO, (dev.key, row.name, "probe"),
                              f"GPU {dev.key}: probing {row.name} failed ({exc.text}); will keep trying")
        if row.buffer is not None:
            dev.buffers[row.name] = 0
        return True

    def _mig_devices(self, index: int, handle) -> list[_Device]:
        mode = self._maybe("nvmlDeviceGetMigMode", handle)
        if not mode or mode[0] != 1:
            return []
        out = []
        for i in range(self._maybe("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = self._maybe("nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
            if mig is not None:
                out.append(self._probe(self._listed(i, mig, parent=index)))
        return out
