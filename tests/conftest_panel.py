"""Helpers for the panel tests: a real kernel that records widget traffic, a real Jupyter
server (JupyterLab or Notebook 7) on 127.0.0.1, and headless Chromium."""

from __future__ import annotations

import ast
import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import psutil

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


# -- a real kernel ------------------------------------------------------------------------------
@dataclass
class Sent:
    """One widget message seen on IOPub: when the kernel sent it, which widget, which state
    keys, its buffers."""

    time: float
    comm_id: str
    keys: tuple[str, ...]
    buffers: tuple[bytes, ...]


@dataclass
class KernelSession:
    """A kernel started with jupyter_client; every IOPub message is kept with its arrival time."""

    km: object
    kc: object
    models: dict[str, str] = field(default_factory=dict)  # comm_id -> model name
    updates: list[Sent] = field(default_factory=list)
    outputs: list[dict] = field(default_factory=list)

    def _take(self, msg: dict) -> None:
        kind, content = msg["msg_type"], msg["content"]
        sent_at = msg["header"]["date"]
        now = sent_at.timestamp() if hasattr(sent_at, "timestamp") else time.time()
        if kind == "comm_open":
            self.models[content["comm_id"]] = content.get("data", {}).get("state", {}).get("_model_name", "")
        elif kind == "comm_msg" and content.get("data", {}).get("method") == "update":
            state = content["data"].get("state", {})
            self.updates.append(Sent(now, content["comm_id"], tuple(sorted(state)),
                                     tuple(bytes(b) for b in msg.get("buffers", ()))))
        elif kind in ("stream", "error", "execute_result", "display_data"):
            self.outputs.append(msg)

    def drain(self, seconds: float) -> None:
        """Read IOPub for ``seconds``."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                self._take(self.kc.get_iopub_msg(timeout=min(left, 0.2)))
            except queue.Empty:
                pass

    def run(self, code: str, timeout: float = 60.0, cell_id: str | None = None) -> dict:
        """Execute ``code`` (as notebook cell ``cell_id`` if given), keep IOPub flowing
        meanwhile; returns the execute reply content."""
        if cell_id is None:
            msg_id = self.kc.execute(code)
        else:
            content = {"code": code, "silent": False, "store_history": True, "user_expressions": {},
                       "allow_stdin": False, "stop_on_error": True}
            msg = self.kc.session.msg("execute_request", content, metadata={"cellId": cell_id})
            self.kc.shell_channel.send(msg)
            msg_id = msg["header"]["msg_id"]
        end = time.monotonic() + timeout
        reply = None
        idle = False
        while time.monotonic() < end and not (reply and idle):
            try:
                msg = self.kc.get_iopub_msg(timeout=0.1)
                self._take(msg)
                if (msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "status"
                        and msg["content"]["execution_state"] == "idle"):
                    idle = True
            except queue.Empty:
                pass
            if reply is None:
                try:
                    r = self.kc.get_shell_msg(timeout=0.01)
                    if r["parent_header"].get("msg_id") == msg_id:
                        reply = r
                except queue.Empty:
                    pass
        assert reply is not None, f"no reply to {code!r} within {timeout} s"
        return reply["content"]

    def value(self, expression: str):
        """Evaluate ``expression`` in the kernel and return it (must be a Python literal)."""
        n = len(self.outputs)
        content = self.run(f"print(repr({expression}))")
        assert content["status"] == "ok", content
        return ast.literal_eval(self.stdout_since(n).strip())

    def stdout_since(self, n: int) -> str:
        """What the kernel printed (stdout only) since ``outputs[n]``."""
        return "".join(m["content"]["text"] for m in self.outputs[n:]
                       if m["msg_type"] == "stream" and m["content"].get("name") == "stdout")

    def lines_ids(self) -> set[str]:
        return {cid for cid, name in self.models.items() if name == "LinesModel"}


def max_per_second(times: list[float]) -> int:
    """Most messages inside any half-open one-second window."""
    times = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - 1.0:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


@contextlib.contextmanager
def kernel_session():
    """A fresh python3 kernel of this interpreter, shut down afterwards."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", startup_timeout=90)
    try:
        yield KernelSession(km, kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


# -- a real Jupyter server ------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_notebook(path: Path, cells: list[str]) -> None:
    """A minimal nbformat-4 notebook of code cells."""
    nb = {"cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "outputs": [],
                     "execution_count": None, "source": src} for i, src in enumerate(cells)],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                      "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))


@dataclass
class Server:
    base: str
    token: str
    root: Path

    def url(self, app: str, notebook: str) -> str:
        where = "lab/tree" if app == "jupyterlab" else "notebooks"
        return f"{self.base}/{where}/{notebook}?token={self.token}"

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.base}{path}?token={self.token}", method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None


@contextlib.contextmanager
def jupyter_server(app: str, root: Path, theme: str | None = None):
    """Start ``jupyterlab`` or ``notebook`` on 127.0.0.1 serving ``root``; stop it afterwards."""
    token = "nbgpu-test"
    port = free_port()
    settings = root / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    if theme:
        (settings / "themes.jupyterlab-settings").write_text(json.dumps({"theme": theme}))
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(root / ".settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(root / ".workspaces"),
               JUPYTER_RUNTIME_DIR=str(root / ".runtime"))
    cmd = [sys.executable, "-m", app, "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--ServerApp.token={token}",
           f"--ServerApp.root_dir={root}", "--ServerApp.allow_root=True", "--expose-app-in-browser"]
    log = open(root / ".server.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    server = Server(f"http://127.0.0.1:{port}", token, root)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                server.api("/api/status")
                break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = (root / ".server.log").read_text()[-2000:]
                    raise RuntimeError(f"{app} did not start: {tail}") from exc
                time.sleep(0.3)
        yield server
    finally:
        with contextlib.suppress(Exception):
            for k in server.api("/api/kernels"):
                server.api(f"/api/kernels/{k['id']}", method="DELETE")
        stop_process(proc)
        log.close()


PATHS = """() => Array.from(document.querySelectorAll('.nbgpu-spark path.line')).map(
    p => p.getAttribute('d') || '')"""
VALUES = "() => Array.from(document.querySelectorAll('.nbgpu-v')).map(e => e.textContent)"


MOTION_WAIT_S = 12.0  # a watched sampler drains utilisation every 5 s; a refresh is 1-5 s


def panel_motion(page, timeout_ms: int = 90_000) -> tuple[list, list, list]:
    """Once the panel drew lines and numbers: its line paths, the same paths once every drawn
    line has moved (or ``MOTION_WAIT_S`` passed), and its values."""
    page.wait_for_selector(".nbgpu-spark path.line", state="attached", timeout=timeout_ms)
    page.wait_for_function(
        "() => Array.from(document.querySelectorAll('.nbgpu-v')).some(e => /\\d/.test(e.textContent))",
        timeout=30_000)
    time.sleep(1.0)
    before = page.evaluate(PATHS)
    deadline = time.monotonic() + MOTION_WAIT_S
    while True:
        time.sleep(0.5)
        after = page.evaluate(PATHS)
        moved = len(after) == len(before) and all(
            a != b for a, b in zip(before, after, strict=True) if b.count("L") >= 2)
        if moved or time.monotonic() > deadline:
            return before, after, page.evaluate(VALUES)


def assert_sparklines_moved(before: list[str], after: list[str]) -> None:
    """Every sparkline path (more than two points: not a baseline or a rule) of ``before``
    changed in ``after``, and there were at least four."""
    assert len(after) == len(before), (before, after)
    drawn = [i for i, d in enumerate(before) if d.count("L") >= 2]
    assert len(drawn) >= 4, before
    for i in drawn:
        assert before[i] != after[i], f"sparkline {i} did not change within {MOTION_WAIT_S:g} s"


def stop_process(proc: subprocess.Popen) -> None:
    """Terminate ``proc``, then kill it if it has not ended within 20 s."""
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@contextlib.contextmanager
def chromium_page(profile_dir: Path, width: int = 1280, height: int = 800):
    """A page of headless Debian Chromium driven by Playwright, with a fresh profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(
            str(profile_dir), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height})
        try:
            yield ctx.pages[0] if ctx.pages else ctx.new_page()
        finally:
            ctx.close()


def run_all_cells(page, timeout_ms: int = 90_000) -> None:
    """Wait for the open notebook and its kernel, then start "run all cells" (not awaited)."""
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.sessionContext", timeout=timeout_ms)
    page.evaluate("""async () => {
        const w = window.jupyterapp.shell.currentWidget;
        await w.context.ready;
        await w.sessionContext.ready;
        window.jupyterapp.commands.execute('notebook:run-all-cells');
    }""")


def loaded_shell():
    """An IPython shell with nbgpu loaded; afterwards unloaded, panels closed, session reset."""
    from IPython.core.interactiveshell import InteractiveShell

    from nbgpu import config, session
    from nbgpu.widgets import registry

    registry.close_all()  # panels another test of this process left open are not this shell's
    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "nbgpu")
    yield sh
    if "gpumon" in sh.magics_manager.magics["line"]:
        sh.run_line_magic("unload_ext", "nbgpu")
    registry.close_all()
    session.reset()
    config.reset()  # a setting a magic changed (NbGpu.cells) is not the next test's


# -- a panel as the front end sees it ------------------------------------------------------------
def parts(mon) -> SimpleNamespace:
    """A ``GPUMonitor``'s widgets found through its public children, as a front end gets them:
    ``header`` (and, while it draws, ``pause``, ``window``, ``figure``, ``values``, ``lines``,
    ``rules``, ``labels``, ``scales``). A stopped panel keeps its header alone."""
    import ipywidgets as widgets

    first = mon.children[0]
    if isinstance(first, widgets.HTML):
        return SimpleNamespace(header=first)
    controls, grid = mon.children
    header, pause, window = controls.children[-3:]  # after the style (and the views' watcher)
    figure, values = grid.children
    _base, lines, rules, labels = figure.marks
    return SimpleNamespace(header=header, pause=pause, window=window, figure=figure, values=values,
                           lines=lines, rules=rules, labels=labels,
                           scales=[figure.scale_x, figure.scale_y])


def row_titles(mon) -> list[str]:
    """The titles of the panel's rows as shown ("GPU 0", ..., "host")."""
    import html
    import re

    return [html.unescape(t) for t in re.findall(r'class="nbgpu-r"><div><b>(.*?)</b>',
                                                 parts(mon).values.value)]


# -- a front end's view saying it is on screen ---------------------------------------------------
def show(panel, visible: bool = True, view: str = "view-1") -> None:
    """What a front end's view of ``panel`` sends when it comes into view (or leaves it)."""
    panel.views.comm.handle_msg({"content": {"data": {"method": "custom", "content": {
        "view": view, "visible": visible}}}, "buffers": []})


def show_in_kernel(k: KernelSession, visible: bool = True, view: str = "client") -> int:
    """Tell every panel of the kernel ``k`` that a view of it is on screen (or not), as a
    front end's view does; returns how many were told."""
    ids = [cid for cid, name in k.models.items() if name == "AnyModel"]
    for cid in ids:
        k.kc.shell_channel.send(k.kc.session.msg("comm_msg", {"comm_id": cid, "data": {
            "method": "custom", "content": {"view": view, "visible": visible}}}))
    return len(ids)


# -- Voilà ----------------------------------------------------------------------------------------
NOTEBOOK_VOILA = Path(__file__).resolve().parents[1] / "notebooks" / "voila-dashboard.ipynb"
DASHBOARD_ENV = ("NBGPU_DASHBOARD_SOURCE", "NBGPU_DASHBOARD_GPUS", "NBGPU_DASHBOARD_WINDOW")


@contextlib.contextmanager
def voila_server(notebook: Path, workdir: Path) -> Iterator[tuple[str, psutil.Process]]:
    """Serve ``notebook`` with Voilà on 127.0.0.1 at a free port; yield its URL and process.

    Voilà, and every kernel it started, are stopped afterwards, even when the test failed.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in DASHBOARD_ENV}
    env.update(JUPYTER_RUNTIME_DIR=str(workdir / "runtime"), JUPYTER_CONFIG_DIR=str(workdir / "config"))
    cmd = [sys.executable, "-m", "voila", str(notebook), "--no-browser", "--Voila.ip=127.0.0.1",
           f"--Voila.port={port}", "--show_tracebacks=True"]
    log_path = workdir / "voila.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, env=env, cwd=workdir, stdout=log, stderr=subprocess.STDOUT)
    server = psutil.Process(proc.pid)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 90
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"voila did not start: {log_path.read_text()[-2000:]}")
            time.sleep(0.3)
        yield f"http://127.0.0.1:{port}/", server
    finally:
        with contextlib.suppress(psutil.Error):
            children = server.children(recursive=True)
        stop_process(proc)
        for child in children:
            with contextlib.suppress(psutil.Error):
                child.kill()
        log.close()


# -- what the kernel sends a page, counted in the page ----------------------------------------------
def _kernel_message(payload: object) -> dict | None:
    """A kernel websocket frame as a message (JSON text, or the binary v1 protocol)."""
    try:
        if isinstance(payload, str):
            return json.loads(payload)
        b = bytes(payload)
        n = int.from_bytes(b[:8], "little")
        offsets = [int.from_bytes(b[8 + 8 * i:16 + 8 * i], "little") for i in range(n)] + [len(b)]
        parts = [b[offsets[i]:offsets[i + 1]] for i in range(n)]
        return {"header": json.loads(parts[1]), "content": json.loads(parts[4])}
    except Exception:
        return None


@dataclass
class PageUpdates:
    """The widget updates the kernel sent a page: their arrival times, from every kernel
    websocket the page opens."""

    page: object
    times: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.page.on("websocket", lambda ws: ws.on("framereceived", self._take))

    def _take(self, payload) -> None:
        msg = _kernel_message(payload)
        if not isinstance(msg, dict) or msg.get("header", {}).get("msg_type") != "comm_msg":
            return
        data = msg["content"].get("data", {})
        if data.get("method") == "update":
            self.times.append(time.monotonic())

    def during(self, seconds: float) -> int:
        """How many arrive in the next ``seconds`` (Playwright reads frames while it waits)."""
        start = len(self.times)
        self.page.wait_for_timeout(seconds * 1000)
        return len(self.times) - start
