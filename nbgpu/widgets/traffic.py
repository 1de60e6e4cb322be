"""Count what a panel sends to the front end: messages and bytes, per widget.

Wraps each widget's ``_send`` (the one place ipywidgets sends state updates), so the
count is what really went out, with or without a browser or kernel attached.
"""

from __future__ import annotations

import json
import threading
from collections import Counter


class Traffic:
    """Running totals of widget update messages; read ``messages``, ``bytes``, ``per_widget``."""

    def __init__(self) -> None:
        self.messages = 0
        self.bytes = 0
        self.per_widget: Counter[str] = Counter()
        self._lock = threading.Lock()

    def watch(self, widget) -> None:
        """Count every message ``widget`` sends from now on."""
        send = widget._send
        model_id = widget.model_id

        def counted(msg, buffers=None):
            size = len(json.dumps(msg, default=str)) + sum(memoryview(b).nbytes for b in buffers or ())
            with self._lock:
                self.messages += 1
                self.bytes += size
                self.per_widget[model_id] += 1
            return send(msg, buffers=buffers)

        widget._send = counted

    def snapshot(self) -> dict:
        """Totals so far as a plain dict."""
        with self._lock:
            return {"messages": self.messages, "bytes": self.bytes,
                    "widgets": len(self.per_widget),
                    "max_per_widget": max(self.per_widget.values(), default=0)}
