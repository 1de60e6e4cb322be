"""Fault injection into ``SimulatedGPUs``: lost GPUs, unsupported functions, NVML errors,
hangs, memory spikes, XID events (through NVML's event-set calls) and processes put on its
GPUs; the check every NVML call passes first. ``SimulatedGPUs`` mixes this in."""

from __future__ import annotations

from .sim_structs import (
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_ERROR_UNINITIALIZED,
    _error,
    _EventData,
    _EventSet,
    _Handle,
)

XID_EVENT = 0x8  # nvmlEventTypeXidCriticalError
HOST_PID_OFFSET = 2**22  # above any Linux pid_max: a "host PID" no process here has


class FaultInjection:
    """SimulatedGPUs' faults and processes (the state they use is set up in its ``__init__``)."""

    def lose_gpu(self, gpu: int) -> None:
        """From now on every call on ``gpu`` answers GPU_IS_LOST."""
        self._lost.add(gpu)

    def set_unsupported(self, function: str, gpu: int | None = None) -> None:
        """Make ``function`` answer NotSupported (on ``gpu``, or on all GPUs)."""
        self._unsupported.add((function, gpu))

    def inject_error(self, function: str, code: int, gpu: int | None = None,
                     times: int | None = None) -> None:
        """Make ``function`` raise NVML error ``code`` (``times`` calls, or until cleared)."""
        self._errors[(function, gpu)] = [code, times]

    def inject_hang(self, function: str, seconds: float, gpu: int | None = None,
                    times: int | None = 1) -> None:
        """Make ``function`` block for ``seconds`` (``times`` calls, or until cleared).

        A hang ends early when ``release_hangs()`` is called, so a test never waits it out.
        """
        with self._lock:
            self._release.clear()
            self._hangs[(function, gpu)] = [float(seconds), times]

    def release_hangs(self) -> None:
        """End every hang now (blocked calls return) and inject no more."""
        with self._lock:
            self._hangs.clear()
            self._release.set()

    @property
    def hanging(self) -> int:
        """How many calls are blocked in an injected hang right now."""
        return self._hanging

    def wait_hanging(self, timeout: float = 5.0) -> bool:
        """Block until a call is inside an injected hang; False if none started in ``timeout`` s."""
        with self._hang_entered:
            return self._hang_entered.wait_for(lambda: self._hanging > 0, timeout)

    def add_process(self, gpu: int, pid: int, used_bytes: int, *, name: str | None = None,
                    user: str | None = None) -> None:
        """List ``pid`` on ``gpu`` holding ``used_bytes``, beside the model's own process.

        ``name``/``user`` describe a made-up PID (another user's process, say); for a real
        PID (a child this test started) leave them None and they are looked up as usual.
        """
        with self._lock:
            self._procs.setdefault(gpu, []).append((int(pid), int(used_bytes), name, user))

    def simulated_process(self, pid: int) -> tuple[str | None, str | None] | None:
        """(name, user) given to ``add_process`` for a made-up PID; None: look it up."""
        for procs in list(self._procs.values()):
            for p_pid, _used, name, user in procs:
                if self._listed_pid(p_pid) == pid and (name is not None or user is not None):
                    return name, user
        return None

    def add_memory_spike(self, gpu: int, at: float, seconds: float, extra_bytes: int) -> None:
        """Add ``extra_bytes`` of used memory on ``gpu`` from clock time ``at`` for ``seconds``."""
        with self._lock:
            self._spikes.append((gpu, float(at), float(seconds), int(extra_bytes)))

    def inject_xid(self, gpu: int, code: int) -> None:
        """Report XID ``code`` on ``gpu`` to every event set registered for XIDs on it (as
        the driver does: a set made later does not see it)."""
        with self._lock:
            for es in self._event_sets:
                if es.types.get(gpu, 0) & XID_EVENT:
                    es.pending.append(_EventData(_Handle(gpu), XID_EVENT, int(code)))

    @property
    def event_sets_live(self) -> int:
        """Event sets created and not yet freed (a leak shows as a count above zero)."""
        return sum(not es.freed for es in self._event_sets)

    # NVML's event-set calls, as pynvml names them.
    def nvmlEventSetCreate(self) -> _EventSet:  # noqa: N802
        es = _EventSet()
        with self._lock:
            self._event_sets.append(es)
        return es

    def nvmlDeviceRegisterEvents(self, h: _Handle, types: int, es: _EventSet) -> None:  # noqa: N802
        if es.freed or h.mig is not None:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        es.types[h.gpu] = es.types.get(h.gpu, 0) | int(types)

    def nvmlEventSetWait(self, es: _EventSet, timeout_ms: int) -> _EventData:  # noqa: N802
        """The oldest pending event; NVML's Timeout error at once when none is (never sleeps)."""
        if es.freed:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        with self._lock:
            if not es.pending:
                raise _error(NVML_ERROR_TIMEOUT)
            return es.pending.pop(0)

    def nvmlEventSetFree(self, es: _EventSet) -> None:  # noqa: N802
        if es.freed:
            raise _error(NVML_ERROR_INVALID_ARGUMENT)
        es.freed = True

    def _listed_pid(self, pid: int) -> int:
        return pid + HOST_PID_OFFSET if self.hide_host_pids else pid

    @staticmethod
    def _take(table: dict, key: tuple) -> object:
        """The injected value at ``key`` (None: none), used once more (gone after its ``times``)."""
        entry = table.get(key)
        if entry is not None and entry[1] is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del table[key]
        return None if entry is None else entry[0]

    def _hang(self, function: str, gpu: int | None) -> None:
        with self._lock:
            key = (function, gpu) if (function, gpu) in self._hangs else (function, None)
            seconds = self._take(self._hangs, key)
            if seconds is None:
                return
            self._hanging += 1
            self._hang_entered.notify_all()
        try:
            self._release.wait(seconds)
        finally:
            with self._lock:
                self._hanging -= 1

    def _enter(self, function: str, handle: _Handle | None = None) -> None:
        self.calls[function] = self.calls.get(function, 0) + 1
        if self._hangs:
            self._hang(function, None if handle is None else handle.gpu)
        if self._refcount <= 0 and function not in ("nvmlInit", "nvmlShutdown"):
            raise _error(NVML_ERROR_UNINITIALIZED)
        gpu = None if handle is None else handle.gpu
        if gpu is not None and gpu in self._lost:
            raise _error(NVML_ERROR_GPU_IS_LOST)
        for key in ((function, gpu), (function, None)):
            if key in self._unsupported:
                raise _error(NVML_ERROR_NOT_SUPPORTED)
            code = self._take(self._errors, key)
            if code is not None:
                raise _error(code)
