"""The OOM post-mortem as display data: the memory story, then the cell's memory timeline with
the failure marked; static HTML and SVG only, so a saved notebook shows it anywhere."""

from __future__ import annotations

import math
from html import escape
from typing import TYPE_CHECKING

from ..holders import holder_line, release_line
from ..svg import svg_series
from ..units import fmt_bytes

if TYPE_CHECKING:
    from ..profiles.oom import PostMortem


class OomReport:
    """Display data of a ``PostMortem``: text, and HTML leading with the memory story."""

    def __init__(self, post_mortem: PostMortem) -> None:
        self.post_mortem = post_mortem

    def svg(self) -> str:
        """The cell's memory used per GPU, with the failure marked."""
        cap, story = self.post_mortem.capture, self.post_mortem.story
        window = cap.sampler.timeline.between(cap.start_time, max(story.failed_at, cap.start_time))
        data = {"mem_used_bytes": {g.gpu: window.series(g.gpu, "mem_used_bytes") for g in story.gpus}}
        return svg_series(data, [(story.failed_at, "out of memory")], 720, [g.gpu for g in story.gpus])

    def html(self) -> str:
        story = self.post_mortem.story
        head = ["GPU", "NVML used at failure", "NVML peak in cell", "total"]
        sizes = ["nvml_used_bytes", "nvml_peak_bytes", "mem_total_bytes"]
        if story.framework is not None and any(math.isfinite(g.allocated_bytes) for g in story.gpus):
            head += [f"{story.framework} allocated", f"{story.framework} reserved", "outside the framework"]
            sizes += ["allocated_bytes", "reserved_bytes", "outside_framework_bytes"]
        rows = "".join("<tr>" + "".join(f'<td style="padding:2px 8px">{c}</td>' for c in [
            f"{escape(str(g.gpu))}{' ✗' if g.gpu == story.failed_gpu else ''}",
            *(fmt_bytes(getattr(g, name)) for name in sizes)]) + "</tr>" for g in story.gpus)
        table = ('<table class="nbgpu-oom" style="border-collapse:collapse;font-size:12px"><thead><tr>'
                 + "".join(f'<th style="text-align:left;padding:2px 8px">{escape(h)}</th>' for h in head)
                 + f"</tr></thead><tbody>{rows}</tbody></table>")
        parts = [f'<div class="nbgpu-oom-report"><b style="color:#a33">GPU out of memory</b> '
                 f"<code>{escape(story.error)}</code>"]
        if math.isfinite(story.requested_bytes):
            parts.append(f"<p>The failed request: {fmt_bytes(story.requested_bytes)}.</p>")
        parts.append(table)
        if story.holders:
            items = "".join(f"<li><code>{escape(holder_line(r))}</code></li>" for r in story.holders)
            parts.append(f"<p>Held by (<code>%gpumon memory</code> lists every name):</p><ul>{items}</ul>")
        if release := release_line(story.holders, story.freed_by):
            parts.append(f"<p>{escape(release)}.</p>")
        if story.allocations:
            items = "".join(f"<li>{fmt_bytes(a.size_bytes)} on cuda:{a.device}: "
                            f"<code>{escape(' < '.join(a.stack) or '?')}</code></li>"
                            for a in story.allocations)
            parts.append(f"<p>Largest live allocations at the failure:</p><ol>{items}</ol>")
        elif story.allocator_history == "off":
            parts.append("<p style=\"color:#666\">PyTorch's allocator history is off; "
                         "<code>torch.cuda.memory._record_memory_history()</code> before the cell lists the "
                         "largest allocations with their stacks (it slows allocation down).</p>")
        parts.append(f"<div>{self.svg()}</div></div>")
        return "".join(parts)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/plain": self.post_mortem.text(), "text/html": self.html()}
