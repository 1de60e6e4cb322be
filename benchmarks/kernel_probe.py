"""Drive a real IPython kernel through jupyter_client and time the panel's first messages.

Beside the times the client sees (display, comm opens, first update), every run then asks
the kernel when nbgpu's modules finished importing (stamped by an IPython start-up file of
the benchmark's own, ``STAMPS``, in the kernel's own IPYTHONDIR) and the time of the
sampler's first tick, so the raw output says where the wait went. One extra run under
``-X importtime`` (not timed: it slows imports) lists what the cell imported.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import tempfile
import time
from collections.abc import Iterator

from .bytecode import by_package

TIMEOUT_S = 30.0
_MARK = "NBGPU-STARTUP "
# Run in the kernel after the first update: the stamps, the first tick, what got imported and
# what was compiled from source (``_sent_s``: when the cell was sent, set in front of it).
_REPORT_CODE = f"""
import json as _j, sys as _s
from nbgpu import session as _se
from benchmarks import bytecode as _bc
_smp = _se.shared_sampler()
_t = _smp.store.read_stream("host", "tick")[0] if _smp is not None else []
print({_MARK!r} + _j.dumps({{
    "stamps": getattr(__import__("builtins"), "_nbgpu_bench_stamps", []),
    "first_tick": float(_t[0]) if len(_t) else None,
    "modules": sorted(m for m in ("numpy", "pandas", "pyarrow", "bqplot", "ipywidgets", "pynvml",
                                  "torch", "matplotlib", "nbgpu.diagnostics", "nbgpu.profiles")
                      if m in _s.modules),
    "compiled": _bc.compiled_here(_sent_s),
    "dont_write_bytecode": _s.dont_write_bytecode,
}}))
"""
HEAVY_ROOTS = 12  # how many packages the import list keeps
# An IPython start-up file: stamps (epoch seconds) when each of these modules has run.
STAMPS = """
import builtins, importlib.abc, sys, time
_WATCH = {"nbgpu": "nbgpu imported", "nbgpu.magics.extension": "magics imported",
          "nbgpu.sampler": "sampler imported", "nbgpu.widgets.monitor": "panel modules imported"}
builtins._nbgpu_bench_stamps = []


class _Stamps(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _WATCH:
            return None
        for finder in sys.meta_path:
            found = None if finder is self else getattr(finder, "find_spec", None)
            spec = found(name, path, target) if found else None
            if spec is not None and spec.loader is not None:
                run = spec.loader.exec_module

                def timed(module, _run=run, _name=_WATCH[name]):
                    _run(module)
                    builtins._nbgpu_bench_stamps.append((_name, time.time()))

                spec.loader.exec_module = timed
                return spec
        return None


sys.meta_path.insert(0, _Stamps())
"""


@contextlib.contextmanager
def _kernel(env: dict[str, str], stderr=None) -> Iterator[object]:
    """A fresh kernel's client, ready and with its start-up chatter read."""
    from jupyter_client import KernelManager

    ipython_dir = tempfile.mkdtemp(prefix="nbgpu-bench-ipython-")
    startup = os.path.join(ipython_dir, "profile_default", "startup")
    os.makedirs(startup)
    with open(os.path.join(startup, "00-nbgpu-stamps.py"), "w") as f:
        f.write(STAMPS)
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env={**env, "IPYTHONDIR": ipython_dir},
                    **({} if stderr is None else {"stderr": stderr}))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        while True:
            try:
                kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                break
        yield kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        shutil.rmtree(ipython_dir, ignore_errors=True)


def _watch(kc, code: str) -> dict:
    """Send ``code``; epoch seconds of the display, comm opens and first update seen."""
    sent = time.time()
    msg_id = kc.execute(code)
    res: dict = {"sent": sent, "displayed": None, "first_update": None, "first_comm_open": None,
                 "last_comm_open": None, "comm_opens": 0, "errors": [], "output": []}
    views: list[str] = []
    while time.time() - sent < TIMEOUT_S and res["first_update"] is None:
        try:
            msg = kc.get_iopub_msg(timeout=0.5)
        except queue.Empty:
            continue
        kind, content, now = msg["msg_type"], msg["content"], time.time()
        if kind == "comm_open":
            if content.get("data", {}).get("state", {}).get("_model_name") == "AnyModel":
                views.append(content["comm_id"])
            res["comm_opens"] += 1
            res["first_comm_open"] = res["first_comm_open"] or now
            res["last_comm_open"] = now
        elif kind == "display_data" and res["displayed"] is None:
            if "application/vnd.jupyter.widget-view+json" in content.get("data", {}):
                res["displayed"] = now
                show_views(kc, views)  # as a front end's view does once it is on screen
        elif kind == "comm_msg" and content.get("data", {}).get("method") == "update":
            if res["displayed"] is not None:
                res["first_update"] = now
        elif kind == "error":
            res["errors"].append(f"{content.get('ename')}: {content.get('evalue')}")
        elif kind == "stream" and msg["parent_header"].get("msg_id") == msg_id:
            res["output"].append(content.get("text", "")[:300])
    return res


def show_views(kc, comm_ids: list[str], visible: bool = True) -> None:
    """Send what a front end's view of a panel sends when it comes on screen (or leaves it):
    nbgpu's panels refresh only while one is (``nbgpu.widgets.visibility``)."""
    for cid in comm_ids:
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": cid, "data": {
            "method": "custom", "content": {"view": "client", "visible": visible}}}))


def _ask(kc, code: str, timeout_s: float = TIMEOUT_S, printed: list[str] | None = None) -> dict | None:
    """Run ``code`` and return the JSON it printed after ``_MARK`` (None if nothing came);
    what it printed, and any error, go into ``printed`` where given."""
    printed = [] if printed is None else printed

    def hook(msg) -> None:
        if msg["msg_type"] == "stream":
            printed.append(msg["content"].get("text", ""))
        elif msg["msg_type"] == "error":
            printed.append(f"error: {msg['content'].get('ename')}: {msg['content'].get('evalue')}\n")

    reply = kc.execute_interactive(code, timeout=timeout_s, output_hook=hook)
    if reply["content"].get("status") != "ok":
        return None
    for line in "".join(printed).splitlines():
        if line.startswith(_MARK):
            return json.loads(line[len(_MARK):])
    return None


def timeline(seen: dict, kernel: dict | None) -> list[list]:
    """[phase, seconds since the cell was sent, seconds since the previous phase], in time order.

    Kernel stamps and what the client saw merge into one list; both use this machine's clock.
    """
    sent = seen["sent"]
    events = [(f"kernel: {name}", t) for name, t in (kernel or {}).get("stamps", [])]
    if kernel and kernel.get("first_tick") is not None:
        events.append(("kernel: sampler's first tick began", kernel["first_tick"]))
    for key, label in (("first_comm_open", "client: first comm_open"),
                       ("last_comm_open", "client: last comm_open before the update"),
                       ("displayed", "client: panel displayed"),
                       ("first_update", "client: first panel update")):
        if seen.get(key) is not None:
            events.append((label, seen[key]))
    events.sort(key=lambda e: e[1])
    out, prev = [], sent
    for name, t in events:
        out.append([name, round(t - sent, 4), round(t - prev, 4)])
        prev = t
    return out


def _one(env: dict[str, str], code: str) -> dict:
    with _kernel(env) as kc:
        seen = _watch(kc, code)
        kernel = (_ask(kc, f"_sent_s = {seen['sent']!r}\n" + _REPORT_CODE)
                  if seen["first_update"] is not None else None)
    sent = seen["sent"]
    return {"displayed_s": None if seen["displayed"] is None else seen["displayed"] - sent,
            "first_update_s": None if seen["first_update"] is None else seen["first_update"] - sent,
            "comm_opens": seen["comm_opens"], "errors": seen["errors"], "output": seen["output"],
            "modules": (kernel or {}).get("modules"), "timeline": timeline(seen, kernel),
            "compiled": (kernel or {}).get("compiled"),
            "dont_write_bytecode": (kernel or {}).get("dont_write_bytecode")}


def parse_importtime(text: str) -> dict:
    """Top-level imports (cumulative ms), own time per root package (ms) and every module
    imported, from ``-X importtime``."""
    top: list[tuple[str, float]] = []
    roots: dict[str, float] = {}
    modules: list[str] = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line[len("import time:"):].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue  # the header line
        own_us, cum_us, name = int(parts[0]), int(parts[1]), parts[2]
        module = name.strip()
        modules.append(module)
        depth = (len(name) - len(name.lstrip(" ")) - 1) // 2
        roots[module.split(".")[0]] = roots.get(module.split(".")[0], 0.0) + own_us / 1000
        if depth == 0:
            top.append((module, cum_us / 1000))
    top.sort(key=lambda m: -m[1])
    heavy = sorted(roots.items(), key=lambda r: -r[1])[:HEAVY_ROOTS]
    return {"top_level_ms": [[m, round(ms, 1)] for m, ms in top[:HEAVY_ROOTS]],
            "own_ms_by_package": [[m, round(ms, 1)] for m, ms in heavy],
            "total_own_ms": round(sum(roots.values()), 1), "modules": modules}


def imports_of(env: dict[str, str], code: str) -> dict:
    """What ``code`` imported in a fresh kernel, from ``-X importtime`` (times inflated by it)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel-stderr.txt")
        with open(path, "wb") as err, _kernel({**env, "PYTHONPROFILEIMPORTTIME": "1"}, err) as kc:
            start = os.path.getsize(path)  # what the kernel imported before the cell
            seen = _watch(kc, code)
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", "replace")
    out = parse_importtime(text)
    out["first_update_s_under_importtime"] = (None if seen["first_update"] is None
                                              else seen["first_update"] - seen["sent"])
    return out


def first_panel_update(env: dict[str, str], repeats: int, source: str | None = "sim",
                       imports: bool = True) -> dict:
    """Seconds from sending the magics to the panel's display and to its first update.

    ``source`` None runs a plain ``%gpumon`` (real GPUs); a fresh kernel for every repeat.
    Each run carries its ``timeline`` (see ``timeline``); ``imports`` adds one untimed
    ``-X importtime`` run.
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
    elif imports:
        out["imports"] = imports_of(env, code)
        cell = set(out["imports"]["modules"])
        for run in runs:  # what each timed run compiled from source among the cell's imports
            if run.get("compiled") is not None:
                run["compiled_in_cell_by_package"] = by_package(run["compiled"], cell)
    return out
