"""A stand-in for the kernel's comm that records what widgets would send to the front end.

``install()`` makes ``comm.create_comm`` return a ``RecordingComm``: every message is
JSON-encoded (as the kernel's session would) and its size, type, comm and time kept in a
shared ``Log``. Nothing leaves the process.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Message:
    """One message a widget sent: when, which comm, what kind, how many bytes."""

    time: float
    comm_id: str
    msg_type: str
    method: str
    nbytes: int


@dataclass
class Log:
    """Every message recorded since ``clear()``."""

    messages: list[Message] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def clear(self) -> None:
        with self.lock:
            self.messages = []

    def between(self, t0: float, t1: float) -> list[Message]:
        with self.lock:
            return [m for m in self.messages if t0 <= m.time <= t1]


LOG = Log()
_installed = False


def _recording_comm_class():
    from comm.base_comm import BaseComm

    class RecordingComm(BaseComm):
        """A comm whose messages are encoded and logged instead of sent."""

        def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys) -> None:
            body = json.dumps({"data": data or {}, "metadata": metadata or {}}, default=str)
            size = len(body.encode()) + sum(memoryview(b).nbytes for b in buffers or ())
            method = (data or {}).get("method", "") if isinstance(data, dict) else ""
            with LOG.lock:
                LOG.messages.append(Message(time.perf_counter(), self.comm_id, msg_type, method, size))

    return RecordingComm


def install() -> Log:
    """Route every widget created from now on through a recording comm; returns the log."""
    global _installed
    if not _installed:
        import comm

        cls = _recording_comm_class()
        comm.create_comm = lambda *args, **kwargs: cls(*args, **kwargs)
        _installed = True
    return LOG
