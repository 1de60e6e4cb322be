"""``nbgpu demo``: JupyterLab on the quickstart notebook, bound to 127.0.0.1."""

from __future__ import annotations

import importlib.util
import os
import secrets
import socket
import subprocess
import sys
from importlib import resources
from pathlib import Path

from ..errors import NbgpuError
from .shared_options import sigterm_as_ctrl_c

NOTEBOOK = Path("notebooks") / "quickstart.ipynb"


def shipped_notebook(name: str) -> Path | None:
    """A notebook shipped inside the package (``nbgpu/notebooks/<name>``), or None."""
    path = Path(str(resources.files("nbgpu") / "notebooks" / name))
    return path if path.is_file() else None


def find_notebook() -> Path:
    """The quickstart notebook: under the current folder, in nbgpu's source tree, else the
    copy shipped in the package (a wheel install has only that one)."""
    for path in (Path.cwd() / NOTEBOOK, Path(__file__).resolve().parents[2] / NOTEBOOK):
        if path.exists():
            return path
    if found := shipped_notebook(NOTEBOOK.name):
        return found
    raise NbgpuError(f"{NOTEBOOK} was not found here or beside nbgpu's sources; run `nbgpu demo` "
                     "from the nbgpu repository folder")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_demo(port: int = 0, browser: bool = True) -> int:
    """Start JupyterLab on the quickstart notebook (127.0.0.1 only, a fresh token, the notebook's
    folder as root), print its URL and wait until it exits."""
    if importlib.util.find_spec("jupyterlab") is None:
        raise NbgpuError("JupyterLab is not installed; run `pip install 'nbgpu[demo]'`")
    root, rel = find_notebook().parents[1], NOTEBOOK.as_posix()
    port, token = port or _free_port(), secrets.token_hex(16)
    cmd = [sys.executable, "-m", "jupyterlab", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
           f"--ServerApp.open_browser={browser}", f"--LabApp.default_url=/lab/tree/{rel}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    print(f"nbgpu demo: open http://127.0.0.1:{port}/lab/tree/{rel}?token={token}", flush=True)
    print("nbgpu demo: press Ctrl-C to stop JupyterLab", file=sys.stderr, flush=True)
    proc = subprocess.Popen(cmd)
    try:
        with sigterm_as_ctrl_c():
            return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        return 130
