"""The panel's cost with a real front end: JupyterLab in headless Chromium showing ``%gpumon``.

A JupyterLab server on 127.0.0.1 and Debian's Chromium (Playwright) open a notebook; its
kernel is measured from outside (every thread's ``/proc/<pid>/task/<tid>/schedstat``) and
the page from Chromium's own metrics (CDP ``Performance.getMetrics``: ``TaskDuration``, all
the renderer's main-thread work, and ``ScriptDuration``, its JavaScript), over ``seconds``
in each phase, one after another in one kernel:

- ``idle``: the notebook open, nothing run;
- ``sampler``: ``%load_ext nbgpu`` and the kernel's sampler (``source``), no panel;
- ``panel_visible``: ``%gpumon`` on screen;
- ``panel_out_of_view``: the same panel scrolled out of view.

Run: ``python -m benchmarks.browser_cost --source sim:8 --out DIR`` (needs jupyterlab,
playwright and /usr/bin/chromium; writes ``browser-cost-<source>.json``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from .kernel_cost import run_facts, thread_cpu_ns

CHROMIUM = "/usr/bin/chromium"
TOKEN = "nbgpu-bench"
SCROLL_AWAY = """() => { const o = document.querySelector('.jp-WindowedPanel-outer');
    o.scrollTop = o.scrollHeight; }"""
IN_VIEW = """() => { const p = document.querySelector('.nbgpu-panel'); if (!p) return false;
    const r = p.getBoundingClientRect(); return r.bottom > 0 && r.top < window.innerHeight; }"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _lab(root: Path):
    port = _free_port()
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", f"--ServerApp.token={TOKEN}", f"--ServerApp.root_dir={root}",
           "--ServerApp.allow_root=True", "--expose-app-in-browser"]
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(root / ".settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"),
               JUPYTER_RUNTIME_DIR=str(root / ".runtime"))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(OSError):
                urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=2)
                break
            time.sleep(0.3)
        yield proc, base
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _kernel_pid(server_pid: int) -> int:
    import psutil

    for _ in range(300):
        for child in psutil.Process(server_pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "ipykernel_launcher" in " ".join(child.cmdline()):
                    return child.pid
        time.sleep(0.2)
    raise RuntimeError("the notebook's kernel did not start")


def _run_cell(page, index: int) -> None:
    page.evaluate("""(i) => { const w = window.jupyterapp.shell.currentWidget;
        w.content.activeCellIndex = i;
        window.jupyterapp.commands.execute('notebook:run-cell'); }""", index)


def _measure(page, cdp, pid: int, seconds: float) -> dict:
    def metrics() -> dict:
        return {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}

    b0, c0, t0 = metrics(), thread_cpu_ns(pid), time.monotonic()
    page.wait_for_timeout(seconds * 1000)
    b1, c1, t1 = metrics(), thread_cpu_ns(pid), time.monotonic()
    wall = t1 - t0
    return {"seconds": wall,
            "kernel_cpu_ms_per_s": sum(ns - c0.get(tid, 0) for tid, ns in c1.items()) / 1e6 / wall,
            "browser_task_ms_per_s": (b1["TaskDuration"] - b0["TaskDuration"]) * 1000 / wall,
            "browser_script_ms_per_s": (b1["ScriptDuration"] - b0["ScriptDuration"]) * 1000 / wall}


def browser_cost(source: str, seconds: float) -> dict:
    from playwright.sync_api import sync_playwright

    cells = ["%load_ext nbgpu\nimport nbgpu\nnbgpu.session.ensure_sampler(" + repr(source) + ")",
             f"%gpumon --source {source}",
             "print('\\n'.join(f'line {i}' for i in range(400)))"]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        nb = {"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [],
                         "execution_count": None, "source": src} for i, src in enumerate(cells)],
              "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                          "language": "python"}}, "nbformat": 4, "nbformat_minor": 5}
        (root / "cost.ipynb").write_text(json.dumps(nb))
        with _lab(root) as (server, base), sync_playwright() as p:
            ctx = p.chromium.launch_persistent_context(
                str(root / ".chromium"), executable_path=CHROMIUM, headless=True,
                args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
                viewport={"width": 1440, "height": 900})
            page = ctx.pages[0] if ctx.pages else ctx.new_page()
            page.goto(f"{base}/lab/tree/cost.ipynb?token={TOKEN}")
            page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext"
                                   " && window.jupyterapp.shell.currentWidget.sessionContext.session",
                                   timeout=120_000)
            pid = _kernel_pid(server.pid)
            cdp = ctx.new_cdp_session(page)
            cdp.send("Performance.enable")
            page.wait_for_timeout(5000)
            out = {"source": source, "seconds_per_phase": seconds, "phases": {}}
            out["phases"]["idle"] = _measure(page, cdp, pid, seconds)
            _run_cell(page, 0)
            page.wait_for_timeout(5000)
            out["phases"]["sampler"] = _measure(page, cdp, pid, seconds)
            _run_cell(page, 1)
            page.wait_for_selector(".nbgpu-spark path.line", state="attached", timeout=120_000)
            _run_cell(page, 2)
            page.wait_for_timeout(5000)
            page.evaluate("() => document.querySelector('.nbgpu-panel').scrollIntoView()")
            out["phases"]["panel_visible"] = _measure(page, cdp, pid, seconds)
            page.evaluate(SCROLL_AWAY)
            page.wait_for_function(f"() => !({IN_VIEW})()", timeout=10_000)
            page.wait_for_timeout(2000)
            out["phases"]["panel_out_of_view"] = _measure(page, cdp, pid, seconds)
            ctx.close()
    ph = out["phases"]
    idle = ph["idle"]["kernel_cpu_ms_per_s"]
    out["kernel_nbgpu_ms_per_s"] = {k: v["kernel_cpu_ms_per_s"] - idle for k, v in ph.items() if k != "idle"}
    out["browser_panel_task_ms_per_s"] = (ph["panel_visible"]["browser_task_ms_per_s"]
                                          - ph["panel_out_of_view"]["browser_task_ms_per_s"])
    out["browser_panel_script_ms_per_s"] = (ph["panel_visible"]["browser_script_ms_per_s"]
                                            - ph["panel_out_of_view"]["browser_script_ms_per_s"])
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.browser_cost", description=__doc__.split("\n")[0])
    p.add_argument("--source", default="sim:8")
    p.add_argument("--seconds", type=float, default=20.0, help="measured seconds per phase")
    p.add_argument("--out", default=os.environ.get("OUT", "."))
    a = p.parse_args(argv)
    got = browser_cost(a.source, a.seconds)
    path = Path(a.out) / f"browser-cost-{a.source.replace(':', '')}.json"
    got.update(run_facts('benchmarks.browser_cost', sys.argv[1:] if argv is None else argv))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(got, indent=1))
    for phase, v in got["phases"].items():
        print(f"{phase:18s} kernel {v['kernel_cpu_ms_per_s']:6.2f} ms/s  browser task "
              f"{v['browser_task_ms_per_s']:6.2f} ms/s, script {v['browser_script_ms_per_s']:6.2f} ms/s")
    print(f"the panel in the browser (visible less out of view): task "
          f"{got['browser_panel_task_ms_per_s']:.2f} ms/s, "
          f"script {got['browser_panel_script_ms_per_s']:.2f} ms/s")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
