"""The panel's "who is using the GPU" line: this kernel, this user elsewhere, others (aggregated).

Data from ``Sampler.processes()`` through ``nbgpu.diagnostics.owners.who_uses``; other
users are only a total and a count, never names or command lines. Hidden where the source
reports no process lists (Prometheus). Recomputed at most every ``every_s`` seconds; this
kernel's process tree is walked again only when NVML lists a PID not seen at the last walk
(a listed process's ancestry does not change), since the walk costs more than the rest.
"""

from __future__ import annotations

import getpass
import html

import ipywidgets as widgets

from ..diagnostics.owners import GpuUsers, tree_pids, users_line, who_uses
from .sync import send_values

EVERY_S = 2.0


def users_html(usage: dict[object, GpuUsers]) -> str:
    """One muted line per GPU: "GPU 0 · this kernel 4.0 GiB · others 12.0 GiB (3 processes)"."""
    rows = "".join(f"<div><b>GPU {html.escape(str(gpu))}</b> · {html.escape(users_line(u))}</div>"
                   for gpu, u in usage.items())
    return f'<div class="nbgpu-m nbgpu-procs" title="GPU memory by process owner">{rows}</div>'


class ProcessesLine:
    """An HTML widget the panel shows under its rows, refreshed from the sampler's process lists."""

    def __init__(self, every_s: float = EVERY_S) -> None:
        self.widget = widgets.HTML(layout=widgets.Layout(display="none", margin="2px 0 0 0"))
        self.every_s = float(every_s)
        self._at = -float("inf")
        self._walked: frozenset[int] = frozenset()  # the PIDs listed at the last walk
        self._mine: set[int] = set()
        self._user = getpass.getuser()  # who_uses asks otherwise, every time (tens of us)

    def refresh(self, sampler, now: float, gpus: set | None = None) -> None:
        """Recompute (at most every ``every_s``) for the GPUs shown (None: all) and update the widget."""
        if now - self._at < self.every_s:
            return
        self._at = now
        usage = {g: u for g, u in who_uses(sampler, mine=self._kernel_pids(sampler), user=self._user).items()
                 if gpus is None or g in gpus}
        display = "block" if usage else "none"
        value = users_html(usage) if usage else ""
        send_values(self.widget, value=value)
        if self.widget.layout.display != display:
            self.widget.layout.display = display

    def _kernel_pids(self, sampler) -> set[int]:
        """This kernel's PIDs, walked again only when NVML lists a PID the last walk did not see."""
        listed = frozenset(p.pid for procs in sampler.processes().values() for p in procs)
        if not listed <= self._walked:
            self._mine = tree_pids()
            self._walked = listed
        return self._mine
