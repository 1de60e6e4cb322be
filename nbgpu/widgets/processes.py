"""The panel's "who is using the GPU" line: this kernel, this user elsewhere, others (only a
total and a count, never names). Hidden where the source lists no processes (Prometheus).
"""

from __future__ import annotations

import getpass
import html

from ..diagnostics.owners import tree_pids, users_line, who_uses

EVERY_S = 2.0


class ProcessesLine:
    """The HTML the panel shows under its rows ("" with no process to show), recomputed at
    most every ``every_s`` from the sampler's process lists."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.html = ""
        self.every_s = float(every_s)
        self._at = -float("inf")
        self._walked: frozenset[int] = frozenset()  # the PIDs listed at the last walk
        self._mine: set[int] = set()
        self._user = getpass.getuser()  # who_uses asks otherwise, every time (tens of us)

    def refresh(self, sampler, now: float, gpus: set | None = None) -> str:
        """``html`` for the GPUs shown (None: all)."""
        if now - self._at < self.every_s:
            return self.html
        self._at = now
        # The kernel's process tree (a costly walk) again only when NVML lists a PID not seen.
        listed = frozenset(p.pid for procs in sampler.processes().values() for p in procs)
        if not listed <= self._walked:
            self._mine, self._walked = tree_pids(), listed
        # One muted line per GPU: "GPU 0 · this kernel 4.0 GiB · others 12.0 GiB (3 processes)".
        rows = "".join(f"<div><b>GPU {html.escape(str(gpu))}</b> · {html.escape(users_line(u))}</div>"
                       for gpu, u in who_uses(sampler, mine=self._mine, user=self._user).items()
                       if gpus is None or gpu in gpus)
        self.html = f'<div class="nbgpu-m nbgpu-procs" title="GPU memory by process owner">{rows}</div>' \
            if rows else ""
        return self.html
