"""Drive a real IPython kernel through jupyter_client and time the panel's first messages."""

from __future__ import annotations

import queue
import time

TIMEOUT_S = 30.0


def _one(env: dict[str, str], code: str) -> dict:
    from jupyter_client import KernelManager

    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        while True:  # drop start-up chatter
            try:
                kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                break
        t0 = time.perf_counter()
        msg_id = kc.execute(code)
        res: dict = {"displayed_s": None, "first_update_s": None, "comm_opens": 0, "errors": []}
        while time.perf_counter() - t0 < TIMEOUT_S and res["first_update_s"] is None:
            try:
                msg = kc.get_iopub_msg(timeout=0.5)
            except queue.Empty:
                continue
            kind, content = msg["msg_type"], msg["content"]
            now = time.perf_counter() - t0
            if kind == "comm_open":
                res["comm_opens"] += 1
            elif kind == "display_data" and res["displayed_s"] is None:
                if "application/vnd.jupyter.widget-view+json" in content.get("data", {}):
                    res["displayed_s"] = now
            elif kind == "comm_msg" and content.get("data", {}).get("method") == "update":
                if res["displayed_s"] is not None:
                    res["first_update_s"] = now
            elif kind == "error":
                res["errors"].append(f"{content.get('ename')}: {content.get('evalue')}")
            elif kind == "stream" and msg["parent_header"].get("msg_id") == msg_id:
                res.setdefault("output", []).append(content.get("text", "")[:300])
        return res
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def first_panel_update(env: dict[str, str], repeats: int, source: str | None = "sim") -> dict:
    """Seconds from sending the magics to the panel's display and to its first update.

    ``source`` None runs a plain ``%gpumon`` (real GPUs); a fresh kernel for every repeat.
    """
    code = "%load_ext nbgpu\n%gpumon" + (f" --source {source}" if source else "")
    runs = [_one(env, code) for _ in range(repeats)]
    out = {"code": code, "runs": runs,
           "displayed_s": [r["displayed_s"] for r in runs if r["displayed_s"] is not None],
           "first_update_s": [r["first_update_s"] for r in runs if r["first_update_s"] is not None]}
    if not out["first_update_s"]:
        errors = [e for r in runs for e in r["errors"]]
        out["unavailable"] = ("no panel update seen within "
                              f"{TIMEOUT_S:g} s" + (f": {errors[0]}" if errors else ""))
    return out
