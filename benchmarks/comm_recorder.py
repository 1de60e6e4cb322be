"""Stand-ins for the kernel's comm that record what widgets would send to the front end.

``install()`` makes ``comm.create_comm`` return a ``RecordingComm``: every message is
JSON-encoded and its size, type, comm and time kept in a shared ``Log``. Nothing leaves the
process. That leaves out what a kernel does with each message; ``KernelLikeComms`` does it:
a ``jupyter_client`` session builds, serialises and signs each message on the sending thread
and hands it to ipykernel's own IOPub thread, which sends it on a zmq PUB socket nobody reads
(an in-process address), as a kernel's comm does.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
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
    import comm

    cls = _recording_comm_class()
    comm.create_comm = lambda *args, **kwargs: cls(*args, **kwargs)
    return LOG


class KernelLikeComms:
    """While started, widgets created get comms that send as a kernel's do (see the module's
    docstring); each message is also logged (its size as 0: weighing it would add work).
    ``stop()`` ends the IOPub thread and puts the recording comm back."""

    def __init__(self) -> None:
        import os

        import zmq
        from ipykernel.iostream import IOPubThread
        from jupyter_client.session import Session

        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.PUB)
        self.address = f"inproc://nbgpu-bench-{os.getpid()}-{id(self)}"  # (same context only)
        self._socket.bind(self.address)
        self._thread = IOPubThread(self._socket)
        self.session = Session(key=os.urandom(32))
        self.parent = {"header": self.session.msg_header("execute_request")}
        self.iopub = self._thread.background_socket
        self.stopped = False

    def start(self) -> KernelLikeComms:
        import comm
        from comm.base_comm import BaseComm

        self._thread.start()
        owner = self

        class KernelLikeComm(BaseComm):
            def publish_msg(self, msg_type, data=None, metadata=None, buffers=None, **keys) -> None:
                if owner.stopped:  # a widget closed after the run: nothing left to send on
                    return
                content = dict(data={} if data is None else data, comm_id=self.comm_id, **keys)
                owner.session.send(owner.iopub, msg_type, content, metadata=metadata or {},
                                   parent=owner.parent, ident=self.topic, buffers=buffers)
                method = (data or {}).get("method", "") if isinstance(data, dict) else ""
                with LOG.lock:
                    LOG.messages.append(Message(time.perf_counter(), self.comm_id, msg_type, method, 0))

        comm.create_comm = lambda *args, **kwargs: KernelLikeComm(*args, **kwargs)
        return self

    def subscriber(self):
        """A SUB socket on the messages sent (tests read what a front end would get)."""
        import zmq

        sub = self._context.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(self.address)
        return sub

    @property
    def thread(self):
        """The IOPub thread (a ``threading.Thread``)."""
        return self._thread.thread

    def stop(self) -> None:
        self.stopped = True
        self._thread.stop()
        self._context.destroy(linger=0)  # every socket of it, a test's subscriber too
        install()


@contextlib.contextmanager
def counted_sends() -> Iterator[list[int]]:
    """While held, ``[n]``: the state updates every widget sent (``Widget._send`` calls), with
    any comm, a kernel's included."""
    from ipywidgets import Widget

    count = [0]
    original = Widget._send

    def counting(self, msg, buffers=None):
        count[0] += 1
        return original(self, msg, buffers=buffers)

    Widget._send = counting
    try:
        yield count
    finally:
        Widget._send = original
