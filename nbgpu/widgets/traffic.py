"""Count what a panel sends to the front end: messages per widget, and bytes when asked.

Wraps each widget's ``_send`` (the one place ipywidgets sends state updates), so the
count is what really went out, with or without a browser or kernel attached. Counting
bytes means JSON-encoding every message a second time (the kernel encodes it too), which
was a sixth of a refresh, so a panel counts bytes only when ``count_bytes`` is set; the
benchmarks measure bytes at the comm instead (``benchmarks/comm_recorder.py``).
"""

from __future__ import annotations

import json
import threading
from collections import Counter


class Traffic:
    """Running totals of widget update messages; read ``messages``, ``bytes``, ``per_widget``.

    Args:
        count_bytes: also add up each message's size (JSON text plus binary buffers);
            ``bytes`` is None (not counted) otherwise. Settable while watching.
    """

    def __init__(self, count_bytes: bool = False) -> None:
        self.messages = 0
        self.count_bytes = bool(count_bytes)
        self._bytes = 0
        self.per_widget: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def bytes(self) -> int | None:
        """Bytes sent since counting began; None when bytes are not counted."""
        return self._bytes if self.count_bytes else None

    def watch(self, widget) -> None:
        """Count every message ``widget`` sends from now on."""
        send = widget._send
        model_id = widget.model_id

        def counted(msg, buffers=None):
            size = (len(json.dumps(msg, default=str)) + sum(memoryview(b).nbytes for b in buffers or ())
                    if self.count_bytes else 0)
            with self._lock:
                self.messages += 1
                self._bytes += size
                self.per_widget[model_id] += 1
            return send(msg, buffers=buffers)

        widget._send = counted

    def snapshot(self) -> dict:
        """Totals so far as a plain dict (``bytes`` None when not counted)."""
        with self._lock:
            return {"messages": self.messages, "bytes": self.bytes,
                    "widgets": len(self.per_widget),
                    "max_per_widget": max(self.per_widget.values(), default=0)}
