"""The benchmarks' kernel-like comm sends what a kernel sends: signed Jupyter messages, from the
IOPub thread, so the panel's measured cost includes the kernel's work on each message."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("ipykernel")
zmq = pytest.importorskip("zmq")

from benchmarks.comm_recorder import KernelLikeComms  # noqa: E402


def test_a_widget_update_goes_out_signed_from_the_iopub_thread() -> None:
    import ipywidgets as widgets

    comms = KernelLikeComms().start()
    try:
        sub = comms.subscriber()
        poller = zmq.Poller()
        poller.register(sub, zmq.POLLIN)
        html = widgets.HTML("a")
        sending: list[str] = []
        original = comms.iopub.io_thread._really_send

        def spy(*args, **kwargs):
            sending.append(threading.current_thread().name)
            return original(*args, **kwargs)

        comms.iopub.io_thread._really_send = spy
        msg = None
        for attempt in range(50):  # a SUB joins late: send until an update arrives
            html.value = f"b{attempt}"
            while msg is None and poller.poll(100):
                _idents, frames = comms.session.feed_identities(sub.recv_multipart())
                got = comms.session.deserialize(frames)  # raises on a bad signature
                if got["msg_type"] == "comm_msg":
                    msg = got
            if msg is not None:
                break
        assert msg is not None, "no update reached a subscriber"
        assert msg["content"]["comm_id"] == html.comm.comm_id
        assert msg["content"]["data"]["method"] == "update"
        assert msg["content"]["data"]["state"]["value"].startswith("b")
        assert sending and set(sending) == {"IOPub"}
    finally:
        comms.stop()


def test_after_stop_a_closing_widget_sends_nothing_and_raises_nothing() -> None:
    import ipywidgets as widgets

    comms = KernelLikeComms().start()
    html = widgets.HTML("a")
    comms.stop()
    assert not comms.thread.is_alive()
    html.close()  # its comm's close message has nowhere to go: dropped
