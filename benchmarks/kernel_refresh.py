"""The panel's refresh inside a real IPython kernel: its messages built, signed and sent by
ipykernel as in a notebook.

``cpu_widgets.refresh_cost`` sends through a recording comm that only JSON-encodes each
message. In a kernel every comm message is also cleaned (``json_clean``), given a header,
serialised and signed (HMAC) by the kernel's session on the sending thread, then handed to
the IOPub thread, which sends it. This runs the same refreshes in a fresh kernel (through
``jupyter_client``), with the widgets' own comms, and reports the refreshing thread's CPU per
refresh and the IOPub thread's (``pthread_getcpuclockid``).
"""

from __future__ import annotations

from .kernel_probe import _MARK, _ask, _kernel

TIMEOUT_S = 180.0

_CODE = """
import json as _j, threading as _th, time as _ti
from benchmarks import cpu_widgets as _cw
_io = next((t for t in _th.enumerate() if t.name == "IOPub"), None)
_clk = _ti.pthread_getcpuclockid(_io.ident) if _io is not None else None
_out = {{}}
for _w in {windows!r}:
    _c0 = _ti.clock_gettime(_clk) if _clk is not None else None
    _r = _cw.refresh_cost(_w, {refreshes!r}, comm="kernel")
    if _clk is not None:
        _r["iopub_cpu_ms_per_refresh"] = (_ti.clock_gettime(_clk) - _c0) * 1000.0 / {refreshes!r}
    _out[f"window_{{_w:g}}s"] = _r
print({mark!r} + _j.dumps(_out))
"""


def kernel_refresh_cost(env: dict[str, str], windows: list[float], refreshes: int) -> dict:
    """``refresh_cost`` of each window in one fresh kernel: {"window_<s>s": result}."""
    code = _CODE.format(windows=list(windows), refreshes=refreshes, mark=_MARK)
    printed: list[str] = []
    with _kernel(env) as kc:
        got = _ask(kc, code, TIMEOUT_S, printed)
    if got is None:
        raise RuntimeError(f"the kernel gave no result: {''.join(printed)[-300:]}")
    return got
