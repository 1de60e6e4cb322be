"""Whether anyone sees a panel: a zero-size anywidget whose views (one per output) say
``{"view": id, "visible": bool}`` as they come on or leave the screen; needs no extension build."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import anywidget
import traitlets

log = logging.getLogger("nbgpu")
_subshell: list[str] = []  # the kernel's one subshell for views' messages, once made
_subshell_lock = threading.Lock()

ESM = """
export default {
  render({ model, el }) {
    const view = Math.random().toString(36).slice(2) + Date.now().toString(36);
    let inView = false, said = false, io = null, wait = null;
    const say = (visible) => {
      if (visible !== said) { said = visible; model.send({ view, visible }); }
    };
    const look = () => say(inView && document.visibilityState === "visible");
    const hide = () => say(false);
    const attach = () => {
      if (!el.isConnected) { wait = setTimeout(attach, 100); return; }
      io = new IntersectionObserver((seen) => {
        for (const e of seen) inView = e.isIntersecting;
        look();
      });
      io.observe(el.closest(".nbgpu-panel") || el.parentElement || el);
    };
    document.addEventListener("visibilitychange", look);
    window.addEventListener("pagehide", hide);
    attach();
    return () => {
      clearTimeout(wait);
      if (io) io.disconnect();
      document.removeEventListener("visibilitychange", look);
      window.removeEventListener("pagehide", hide);
      hide();
    };
  },
};
"""


class ViewWatch(anywidget.AnyWidget):
    """Counts the views on screen now (``views_visible``, kernel side only); calls
    ``on_change(True)`` when the first comes into view, ``on_change(False)`` when the last leaves."""

    _esm = ESM
    views_visible = traitlets.Int(0)

    def __init__(self, on_change: Callable[[bool], None]) -> None:
        super().__init__(layout={"width": "0", "height": "0", "margin": "0"})
        self._on_change = on_change
        self._visible: set[str] = set()
        self.on_msg(self._on_view)
        _off_the_main_thread(self.comm)

    def _on_view(self, _widget, content: object, _buffers) -> None:
        if not isinstance(content, dict) or "view" not in content:
            return
        was = bool(self._visible)
        (self._visible.add if content.get("visible") else self._visible.discard)(str(content["view"]))
        self.views_visible = len(self._visible)
        if bool(self._visible) != was:
            self._on_change(not was)
        # ipykernel routes the next message as the last one sent: name the views' thread again.
        _off_the_main_thread(self.comm)


def _off_the_main_thread(comm: object) -> None:
    """Have ipykernel 7 hand this comm's messages to a subshell of their own, so a view coming on
    screen is heard while a cell runs; other kernels keep the plain route (after the cell)."""
    try:
        from ipykernel.kernelbase import Kernel

        if not Kernel.initialized() or not hasattr(comm, "_reply_subshell_for"):
            return
        kernel = Kernel.instance()
        channel = getattr(kernel, "shell_channel_thread", None)
        if channel is None or not getattr(kernel, "_supports_kernel_subshells", False):
            return
        with _subshell_lock:
            if not _subshell:
                manager = channel.manager  # (made lazily on the kernel's main thread)
                made = threading.Event()

                def make() -> None:
                    try:
                        _subshell.append(manager._create_subshell())
                    finally:
                        made.set()

                channel.io_loop.add_callback(make)
                made.wait(5.0)
            if _subshell:
                comm._reply_subshell_id = _subshell[0]
    except Exception:
        log.debug("views' messages keep the main shell's route", exc_info=True)
