"""``GPUMonitor``: the live panel behind ``%gpumon``, refreshed by the kernel's one panel timer
(never the sampler, so a panel error cannot stop sampling)."""

from __future__ import annotations

import logging
import math
import threading
import weakref

import ipywidgets as widgets
from ipywidgets.widgets.widget_string import HTMLStyle

from .. import session
from ..config import check_window
from ..errors import BadArgumentError
from ..metrics import HOST_KEY
from ..sampler import check_sampler
from ..sources.base import Device, HostOnlySource, check_gpus
from . import registry, text
from .columns import (
    DEFAULT_REFRESH_S,
    WINDOW_CHOICES_S,
    check_metrics,
    check_refresh,
    resolve_columns,
    shared_or_host_only,
)
from .panel_draw import BUCKETS, SPARK_PX, PanelDrawing, PanelGrid, ProcessesLine, window_label
from .registry import SCHEDULE
from .visibility import ViewWatch

log = logging.getLogger("nbgpu")

PANEL_LAYOUT = {"border": "1px solid var(--jp-border-color2,#ccc)", "padding": "4px 8px",
                "width": "fit-content", "max_width": "100%", "overflow": "auto"}
HEADER_LAYOUT = {"flex": "1 1 auto", "margin": "0 8px 0 0"}
_stopped: list = []  # the layouts and style every stopped panel shares
MAX_AUTO_REFRESH_S = 5.0  # the longest default refresh: current values stay current
FIRST_DRAW_S = 0.05  # a new panel's first draw once its sampler has data (it is displayed by then)


class GPUMonitor(PanelDrawing, widgets.VBox):
    """Live panel of every GPU (and the host): sparklines plus current values. Arguments as
    ``%gpumon``'s options (docs/panel.md); ``sampler``: draw this ``Sampler`` instead of the
    shared one; ``start=False`` waits for ``start()``; ``processes=False`` hides who holds memory."""

    def __init__(self, source: object = None, interval: float | None = None, *,
                 gpus: object = None, window_s: float | None = None, metrics: object = None,
                 refresh_s: float | None = None, sampler=None, start: bool = True,
                 processes: bool = True) -> None:
        from ..config import settings  # read now: %config NbGpu.* applies to the next panel

        window_s = settings().window_s if window_s is None else window_s
        configured = settings().gpus if gpus is None else ""  # a GPU list set long ago
        gpus = configured or gpus
        self.window_s = check_window(window_s)
        self._refresh_given = None if refresh_s is None else check_refresh(refresh_s)
        self._chosen = check_metrics(metrics)
        check_sampler(sampler, source, interval)
        super().__init__(layout=widgets.Layout(**PANEL_LAYOUT))
        self.add_class("nbgpu-panel")
        self._lock = threading.RLock()
        self.stats: dict[str, int] = {"refreshes": 0, "skipped": 0, "errors": 0}
        self.last_error: str | None = None
        self._paused = self._closed = self._torn_down = False
        self._wanted = False  # started and not stopped: refreshes while a view is on screen
        self.views: ViewWatch | None = None  # says whether a view of the panel is on screen
        self.drawn_span_s: float | None = None  # seconds across the lines last drawn
        self._unsubscribe = None
        self._grid: PanelGrid | None = None
        self._last_key: tuple | None = None
        self._lines_at = -float("inf")
        self._processes = ProcessesLine() if processes else None
        self._shared = sampler is None
        self._released = lambda: None  # a released sampler, held weakly (while something else holds it)
        try:
            if sampler is None:
                sampler = shared_or_host_only(source, interval)
            self.sampler = sampler
            self._attach(sampler, gpus, strict=True)
        except BadArgumentError as exc:
            self.close()  # a panel that cannot be built leaves no widget behind
            if configured:  # say where the list came from
                raise BadArgumentError(f"{exc} (the GPUs of NbGpu.gpus = {configured!r}; "
                                       "%config NbGpu.gpus = '' shows them all)") from None
            raise
        except BaseException:
            self.close()  # a panel that cannot be built leaves no widget behind
            raise
        self.origin = registry.current_cell()
        registry.close_from_cell(self.origin, keep=self)  # re-running a cell replaces its panel
        registry.add(self)
        self._follow()
        if start:
            self.start()

    # -- public ---------------------------------------------------------------------------
    @property
    def timeline(self):
        """The sampler's ``Timeline``: ``mon.timeline.to_pandas()`` gives the data."""
        if (s := self.sampler or self._released()) is None:
            raise BadArgumentError("this stopped panel's sampler was replaced and released; "
                                   "read nbgpu.session.shared_sampler().timeline instead")
        return s.timeline

    @property
    def gpus(self) -> tuple | None:
        """The GPUs shown (``gpus=``, else ``NbGpu.gpus``); None: all."""
        return self._gpus

    @property
    def refresh_s(self) -> float:
        """Seconds between updates: as given, else as often as the lines can move (one bucket of
        2 pixels of the window), 2 s to 5 s: numbers change at a pace a person reads."""
        if self._refresh_given is not None:
            return self._refresh_given
        return min(max(DEFAULT_REFRESH_S, self.window_s / BUCKETS), MAX_AUTO_REFRESH_S)

    @property
    def running(self) -> bool:
        """Whether this panel is started: it refreshes while a view of it is on screen."""
        return self._wanted and not self._closed and not self._torn_down

    @property
    def on_screen(self) -> bool:
        """Whether a view of the panel is on screen now (its front end says so): else it does no work."""
        return self.views is not None and self.views.views_visible > 0

    def start(self) -> GPUMonitor:
        """Start (or resume) updates; restarts the sampler if it was stopped. Returns self."""
        with self._lock:
            if self._closed:
                raise BadArgumentError("this panel was closed; create a new one with nbgpu.GPUMonitor()")
            if self.sampler is None:
                self.sampler = self._released() or shared_or_host_only(None, None)
            if not self.sampler.running:
                if self._shared:
                    new = shared_or_host_only(None, None)
                    if new is not self.sampler:
                        self._attach(new, self._gpus, strict=False)
                else:
                    self.sampler.start()
            if self._torn_down:
                self._torn_down = False
                self._build()
            self._follow()
            registry.add(self)
            self._wanted = True
            self._schedule()
        return self

    def _schedule(self) -> None:
        """On the timer if started and on screen: drawn at once, or once the sampler has read (tick())."""
        if self.running and self.on_screen and not SCHEDULE.has(self):
            first_s = 0.0 if getattr(self.sampler, "ticks", 0) else FIRST_DRAW_S
            SCHEDULE.add(self, first_s)  # its first tick draws the header too

    def _follow(self) -> None:
        """Follow the shared sampler's replacements; the listener holds the panel weakly."""
        if self._shared and self._unsubscribe is None:
            ref = weakref.WeakMethod(self._repoint)
            self._unsubscribe = session.on_replace(lambda old, new: (f := ref()) is not None and f(old, new))

    def _repoint(self, old, new) -> None:
        if not self._closed and self.sampler is old:
            self._attach(new, self._gpus, strict=False)

    def stop(self) -> None:
        """Stop this panel's updates (it stays on screen, marked stopped); the sampler goes on."""
        self._halt(keep_header=True)
        registry.park(self)

    def _halt(self, keep_header: bool) -> None:
        """Leave the timer and the sampler's replacements; with ``keep_header``, tear down to it."""
        SCHEDULE.remove(self)
        with self._lock:
            self._wanted = False
            unsubscribe, self._unsubscribe = self._unsubscribe, None
            if unsubscribe is not None:
                unsubscribe()
            if self._closed or self._torn_down or not keep_header:
                return
            try:
                self._draw_header()
                self._header.value = self._header.value + text.snapshot_html(
                    self._columns, self._rows, self._grid.last_values)
            except Exception:
                log.debug("stopped panel header failed", exc_info=True)
            # Keep only the header, on layouts and a style all stopped panels share (two widgets).
            doomed = registry.descendants(self)
            panel_layout, header_layout, header_style = _stopped_parts()
            self._header.layout, self._header.style, self.layout = header_layout, header_style, panel_layout
            self.children = [self._header]
            self._torn_down = True
            self._drop(doomed, [self._header, self.layout], release=self._shared)

    def close(self) -> None:
        """Stop updates and remove the panel and all its widgets."""
        if hasattr(self, "_lock"):  # (absent: construction failed before the panel existed)
            self._halt(keep_header=False)
            with self._lock:
                self._closed = True
                registry.discard(self)
                self._drop(registry.descendants(self), [], release=True)
        super().close()

    def _drop(self, doomed: list, keep: list, release: bool) -> None:
        """Close ``doomed`` but ``keep`` (and drawing's state, the views' watch with them); with
        ``release``, hold the sampler (and its store) weakly from now on."""
        registry.close_widgets(doomed, keep=[self, *keep])
        self._grid, self.views = None, None
        if release:
            if getattr(self, "sampler", None) is not None:  # absent: construction failed first
                self._released = weakref.ref(self.sampler)
            self.sampler = None

    def pause(self, paused: bool = True) -> None:
        """Freeze (or unfreeze) the drawing; the sampler keeps recording."""
        self._pause_button.value = bool(paused)

    def set_window(self, window_s: float) -> None:
        """Show the last ``window_s`` seconds (5 s to 24 h) and redraw now."""
        window_s = check_window(window_s)
        if window_s not in [v for _, v in self._window_box.options]:
            self._window_box.options = [*self._window_box.options, (window_label(window_s), window_s)]
        self._window_box.value = window_s

    def refresh(self, force: bool = False, now: float | None = None) -> bool:
        """Redraw from the store now; False when skipped (nothing new, paused, stopped).
        ``now``: epoch seconds (None: the sampler's clock), for a fake clock in tests."""
        with self._lock:
            if self._closed or self._torn_down:
                return False
            s = self.sampler
            status = s.status()
            alerts = [a for a in s.alert_list(since_s=math.inf) if a.end is None]
            key = (s.store.generation, status.state, tuple(status.lost), status.errors,
                   self._paused, self.window_s, s.store.events[-1].seq if s.store.events else None,
                   tuple((a.rule, a.gpu, a.start) for a in alerts))
            if not self._paused:  # someone looks at the newest values: keep them fresh
                s.watch()
            if not force and (self._paused or key == self._last_key):
                self.stats["skipped"] += 1
                self._draw_header(status)
                return False
            now = s.now() if now is None else float(now)
            # A long window's pixel is many seconds: its lines are redrawn only when they can move.
            lines = (force or key[1:] != (self._last_key or (None,))[1:]
                     or now - self._lines_at >= self.window_s / (2 * SPARK_PX))
            self._last_key = key
            self.last_error = None  # an earlier failure is over unless _draw fails again
            self._draw(alerts, now, lines, status)
            if lines:
                self._lines_at = now
            self.stats["refreshes"] += 1
            return True

    def __repr__(self) -> str:
        state = ("closed" if self._closed else "stopped" if not self.running
                 else "updating" if self.on_screen else "waiting for a view on screen")
        return (f"<nbgpu.GPUMonitor {len(self._rows)} row(s), window {self.window_s:g}s, every "
                f"{self.refresh_s:g}s, {state}; sampler {self.sampler!r}>")

    # -- building -------------------------------------------------------------------------
    def _attach(self, sampler, gpus: object, strict: bool) -> None:
        """Point the panel at ``sampler`` and (re)build its widgets."""
        with self._lock:
            top = [d.key for d in sampler.devices if d.parent is None]
            try:
                self._gpus = check_gpus(gpus, top)
            except BadArgumentError:
                if strict:
                    raise
                self._gpus = None
            self.sampler = sampler
            shown = [d for d in sampler.devices if self._gpus is None or d.card in self._gpus]
            has_host = HOST_KEY in sampler.store.devices()
            self._rows: list[Device] = list(shown) + ([Device(HOST_KEY, "host")] if has_host else [])
            self._row_keys = {r.key for r in self._rows}
            reported = set().union(*(d.metrics for d in shown)) if shown else {"none"}
            self._columns = resolve_columns(self._chosen, reported)
            status = sampler.status()
            self._describe = ("no GPU visible" if status.source_kind == HostOnlySource.kind
                              else status.source_description.replace(" (simulated)", ""))
            if not self._torn_down:
                self._build()
            self._last_key = None

    def _build(self) -> None:
        old = list(self.children)
        self._header = widgets.HTML(layout=widgets.Layout(**HEADER_LAYOUT))
        self._pause_button = widgets.ToggleButton(
            value=self._paused, description="pause", icon="pause", tooltip="freeze the drawing; "
            "sampling goes on", layout=widgets.Layout(width="96px", height="24px", flex="0 0 auto"))
        self._pause_button.observe(self._on_pause, "value")
        options = [(window_label(v), v) for v in WINDOW_CHOICES_S]
        if self.window_s not in WINDOW_CHOICES_S:
            options.append((window_label(self.window_s), self.window_s))
        self._window_box = widgets.Dropdown(options=options, value=self.window_s,
                                            tooltip="seconds of history shown",
                                            layout=widgets.Layout(width="90px", height="24px",
                                                                  flex="0 0 auto"))
        self._window_box.observe(self._on_window, "value")
        style = widgets.HTML(text.STYLE, layout=widgets.Layout(width="0", height="0", margin="0"))
        if self.views is None or self.views.comm is None:
            self.views = ViewWatch(self._on_screen)
        controls = widgets.HBox([style, self.views, self._header, self._pause_button, self._window_box],
                                layout=widgets.Layout(align_items="center", margin="0 0 4px 0"))
        self._grid = PanelGrid(self._columns, self._rows)
        self.children = [controls, self._grid.box]
        registry.close_widgets([w for o in old for w in registry.descendants(o)], keep=[self.views])

    def held(self) -> dict[str, int]:
        """What the panel keeps between refreshes: traces and buckets (bounded by the window)."""
        with self._lock:
            sset = None if self._grid is None else self._grid.sparks
            traces, buckets = (0, 0) if sset is None else (sset.traces, sset.held())
            return {"traces": traces, "buckets": buckets, "widgets": len(registry.descendants(self))}

    # -- events and the timer thread ---------------------------------------------------------
    def _on_pause(self, change) -> None:
        self._paused = bool(change["new"])
        self._pause_button.description = "resume" if self._paused else "pause"
        self._pause_button.icon = "play" if self._paused else "pause"
        if self._paused:
            self._draw_header()
        else:
            self.refresh(force=True)

    def _on_window(self, change) -> None:
        with self._lock:
            self.window_s = float(change["new"])
            self.refresh(force=True)

    def _on_screen(self, visible: bool) -> None:
        """The first view came on screen (on the timer, drawn at once) or the last left it (off)."""
        with self._lock:
            if visible:
                self._schedule()
            else:
                SCHEDULE.remove(self)

    def tick(self) -> bool | float:
        """One scheduled refresh; False takes the panel off the timer (closed, or no front end),
        seconds look again sooner (the sampler has read nothing yet)."""
        if self._closed or self._torn_down or self.comm is None or not self.on_screen:
            return False
        s = self.sampler
        if self.stats["refreshes"] == 0 and s is not None and s.running and getattr(s, "ticks", 1) == 0:
            self._draw_header()
            return FIRST_DRAW_S
        try:
            self.refresh()
        except Exception as exc:  # a view error is shown, never raised into the sampler
            self.stats["errors"] += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.debug("panel refresh failed", exc_info=True)
            self._draw_header()  # (if this fails too, the timer logs it and keeps the panel)
        return True


def _stopped_parts() -> list:
    """The panel layout, header layout and header style that every stopped panel shows."""
    if not _stopped or any(w.comm is None for w in _stopped):
        _stopped[:] = [registry.share(widgets.Layout(**PANEL_LAYOUT)),
                       registry.share(widgets.Layout(**HEADER_LAYOUT)), registry.share(HTMLStyle())]
    return _stopped

