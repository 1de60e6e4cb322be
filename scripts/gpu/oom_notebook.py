"""Execute a small notebook with a real PyTorch CUDA OOM under ``%%gpumon``; save what the report said.

Usage: ``python scripts/gpu/oom_notebook.py --out DIR`` on a machine with an NVIDIA GPU,
PyTorch (CUDA) and nbclient. Writes ``DIR/oom.ipynb`` (the executed notebook) and
``DIR/oom.json`` (device, driver, command, and the post-mortem's text and figures).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

CELLS = [
    "%load_ext nbgpu\nimport torch, nbgpu, json\n"
    "torch.cuda.memory._record_memory_history(max_entries=100_000)",
    "%%gpumon --interval 0.1\n"
    "keep = [torch.empty(8 * 1024**3, dtype=torch.uint8, device='cuda') for _ in range(4)]\n"
    "free, total = torch.cuda.mem_get_info()\n"
    "too_much = torch.empty(int(free * 1.5), dtype=torch.uint8, device='cuda')",
    "import sys\nrec = nbgpu.profiles.history.records()[-1]\n"
    "story = nbgpu.profiles.oom.build_story(rec.capture, sys.last_value)\n"
    "print(json.dumps({'same_exception': type(sys.last_value).__name__, "
    "'story': story.to_json()}, default=str))",
]


def _device() -> dict:
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {"device": name.decode() if isinstance(name, bytes) else name,
                "driver": driver.decode() if isinstance(driver, bytes) else driver}
    finally:
        pynvml.nvmlShutdown()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="folder for oom.ipynb and oom.json")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": os.getcwd()}}).execute()
    nbformat.write(nb, str(args.out / "oom.ipynb"))
    profiled = nb.cells[1].outputs
    displays = [o for o in profiled if o.get("output_type") == "display_data"]
    errors = [o for o in profiled if o.get("output_type") == "error"]
    story_out = "".join(o.get("text", "") for o in nb.cells[2].outputs if o.get("output_type") == "stream")
    result = {
        **_device(),
        "command": " ".join([sys.executable, *sys.argv]),
        "error": {"ename": errors[0]["ename"], "evalue": errors[0]["evalue"][:300]} if errors else None,
        "first_display_is_story": bool(displays) and
        displays[0]["data"].get("text/plain", "").startswith("GPU out of memory"),
        "report_text": [d["data"].get("text/plain", "") for d in displays],
        "story": json.loads(story_out) if story_out.strip().startswith("{") else story_out,
    }
    (args.out / "oom.json").write_text(json.dumps(result, indent=2, default=str))
    print(json.dumps({k: result[k] for k in ("device", "driver", "error", "first_display_is_story")}))
    print("\n".join(result["report_text"][:1]))
    return 0 if result["first_display_is_story"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
