"""Where the main thread was: while a capture is open, the sampler's thread samples the capturing
thread's stack ``NbGpu.stack_samples_hz`` times a second into a lock-free deque (compact arrays now
and then), each with its category and cell line (``frames``); a line's text is read when asked."""

from __future__ import annotations

import math
import sys
import threading
import weakref
from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .frames import CATEGORIES, CODE, LOADER_CODE, NBGPU, file_kind, inner_code, line_text, loop_of, walk_up
from .window import hold_weights

LABELS = {"gpu_wait": "waiting for the GPU", "data_loader": "data loader",
          "h2d_copy": "copies to the GPU", "gpu_issue": "issuing GPU work", "cpu": "other CPU work",
          "idle": "sleep, I/O, locks"}
COLORS = {"gpu_wait": "#d62728", "data_loader": "#ff7f0e", "h2d_copy": "#9467bd",
          "gpu_issue": "#1f77b4", "cpu": "#2ca02c", "idle": "#bbbbbb"}
KEEP_S = 120.0  # samples kept for the rules after the last capture closed
MIN_SAMPLES = 5  # fewer samples than this in a span: no split (None): under a second at 8 a second


# -- the samples ---------------------------------------------------------------------------
class StackSamples:
    """Classified samples of one sampler's capturing thread: times, categories, cell lines."""

    def __init__(self, hz: float = 10.0) -> None:
        self.hz = hz  # the NbGpu.stack_samples_hz it was set from
        self.period_s = 1.0 / hz if hz > 0 else math.inf
        self._lock = threading.Lock()
        self.times = array("d")
        self.codes = bytearray()
        self.lines = array("i")  # index into ``line_table``; -1: no user frame
        self._fresh: deque[tuple[float, int, int]] = deque()  # samples not yet in the arrays
        self._table: list[list] = []  # [file, shown line, text, loop, offset]; text None: not read yet
        self._line_ids: dict[tuple[str, int, int], int] = {}  # (file, line in the file, offset) -> index
        self._holders: dict[int, tuple[int, object, int]] = {}  # token -> (thread, anchor, line offset)
        self._holder: tuple[int, object, int] | None = None  # the innermost block's
        self._cell: tuple[object, object] = (None, None)  # (holder, its outermost user frame)
        self._token = 0
        self._next_at = -math.inf
        self.sampled = 0

    @property
    def line_table(self) -> list[tuple]:
        """(file, line, text, its loop's (line, text) or None) per line index; text read here once."""
        with self._lock:
            rows = self._table[:]
        for row in rows:
            if row[2] is None:
                row[2:4] = line_text(row[0], row[1] - row[4]), loop_of(row[0], row[1] - row[4], row[4])
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def _line_index(self, file: str, lineno: int, offset: int, text: str | None = None) -> int:
        key = (file, lineno, offset)  # one file may be shown with two numberings
        index = self._line_ids.get(key, -1)
        if index < 0:
            with self._lock:
                index = self._line_ids[key] = len(self._table)
                self._table.append([file, lineno + offset, text, None, offset])
        return index

    def add(self, t: float, category: str, line: tuple[str, int] | None = None,
            text: str | None = None) -> None:
        """Keep one sample (a recording's, replayed); ``line``: (file, line)."""
        index = -1 if line is None else self._line_index(line[0], line[1], 0, text)
        self._fresh.append((t, CODE[category], index))

    def __call__(self, sampler: object, now: float) -> None:
        """The sampler-thread listener: one sample (a cached frame walk) when its period has passed."""
        if now < self._next_at or self._holder is None:
            return
        # Due one period after the last due time (steps come every 10 ms: the rate holds on average)
        late = now - self._next_at > self.period_s
        self._next_at = (now if late else self._next_at) + self.period_s
        holder = self._holder
        thread_id, anchor, offset = holder
        frame = sys._current_frames().get(thread_id)
        if frame is None:
            return
        known = self._cell[1] if self._cell[0] is holder else None
        cell_frame, loader = walk_up(frame, anchor, known)
        code = LOADER_CODE if loader else inner_code(frame)
        del frame
        index = -1
        if cell_frame is not None:
            if cell_frame is not known:  # the block's outermost user frame: later walks end there
                with _registry_lock:  # never kept once its block was released
                    if self._holder is holder:
                        self._cell = (holder, cell_frame)
            lineno = cell_frame.f_lineno  # None mid-instruction on 3.12+
            if lineno is not None:
                index = self._line_index(cell_frame.f_code.co_filename, lineno, offset)
        self._fresh.append((sampler.now(), code, index))  # the step's ``now`` may predate the hold
        self.sampled += 1
        if not self.sampled & 1023:  # now and then, not at every sample: into the arrays
            with self._lock:
                self._pack()

    def _pack(self) -> None:
        """Move the fresh samples into the arrays (``_lock`` held; the deque needs no lock)."""
        fresh = self._fresh
        for _ in range(len(fresh)):
            t, code, index = fresh.popleft()
            self.times.append(t)
            self.codes.append(code)
            self.lines.append(index)

    def _trim(self, before: float) -> None:
        with self._lock:
            self._pack()
            cut = int(np.searchsorted(np.frombuffer(self.times, dtype=np.float64), before))
            if cut:
                del self.times[:cut], self.codes[:cut], self.lines[:cut]

    def between(self, t0: float, t1: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(times, category codes, line indices) of the samples in [t0, t1] (copies)."""
        with self._lock:
            self._pack()
            t = np.array(self.times, dtype=np.float64)
            lo, hi = np.searchsorted(t, t0, "left"), np.searchsorted(t, t1, "right")
            return (t[lo:hi], np.frombuffer(bytes(self.codes[lo:hi]), dtype=np.uint8).copy(),
                    np.array(self.lines[lo:hi], dtype=np.int32))

    def records(self, t0: float, t1: float) -> list[tuple[float, str, int | None, str]]:
        """(epoch s, category, line, its text) of the samples in [t0, t1], as ``read_records``."""
        t, codes, lines = self.between(t0, t1)
        table = self.line_table
        return [(ti, CATEGORIES[c], *((table[li][1], table[li][2]) if li >= 0 else (None, "")))
                for ti, c, li in zip(t.tolist(), codes.tolist(), lines.tolist(), strict=True)]

    def split(self, t0: float, t1: float, coverage: float = 0.0) -> Split | None:
        """The time split of [t0, t1]; None under ``MIN_SAMPLES`` or spanning under ``coverage`` of it."""
        t, codes, lines = self.between(t0, t1)
        if len(t) < MIN_SAMPLES or t[-1] - t[0] < coverage * (t1 - t0) - 2 * self.period_s:
            return None
        return Split.of(t, codes, lines, self.line_table, t0, t1)


@dataclass
class Split:
    """How a span's time divides between ``CATEGORIES`` (shares sum to 1), and its top line."""

    shares: dict[str, float]
    seconds: dict[str, float]
    samples: int
    top_line: dict | None = None  # {"line", "text", "share", "file"}
    lines: dict = field(default_factory=dict)  # (file, line) -> {category: share of the span}

    @classmethod
    def of(cls, t: np.ndarray, codes: np.ndarray, lines: np.ndarray, table: list, t0: float,
           t1: float) -> Split:
        """The split of samples (each counts until the next one, at most 4 periods)."""
        weight = hold_weights(t, t1)
        total = float(weight.sum()) or 1.0
        shares = {c: float(weight[codes == i].sum()) / total for i, c in enumerate(CATEGORIES)}
        span = max(t1 - t0, 0.0)
        per_line: dict = {}
        for index in np.unique(lines[lines >= 0]):
            mask = lines == index
            path, number, text, loop = table[int(index)]
            per_line[(path, number)] = {"text": text, "loop": loop,
                                        "share": float(weight[mask].sum()) / total,
                                        "by": {c: float(weight[mask & (codes == i)].sum()) / total
                                               for i, c in enumerate(CATEGORIES)}}
        top = None
        if per_line:
            (path, number), best = max(per_line.items(), key=lambda kv: kv[1]["share"])
            top = {"line": int(number), "text": best["text"], "share": round(best["share"], 3), "file": path}
        return cls(shares, {c: s * span for c, s in shares.items()}, len(t), top, per_line)

    def line_of(self, category: str) -> dict | None:
        """The cell line holding most of ``category``'s time: {"line", "text", "share", "loop"}."""
        best = max(self.lines.items(), key=lambda kv: kv[1]["by"][category], default=None)
        if best is None or best[1]["by"][category] <= 0:
            return None
        return {"line": int(best[0][1]), "text": best[1]["text"], "share": best[1]["by"][category],
                "loop": best[1]["loop"]}


def where_frame(split: Split | None):
    """``cap.where()``: a row per category (seconds, share), ``attrs["top_line"]`` and ``["samples"]``."""
    import pandas as pd

    rows = [{"category": c, "seconds": split.seconds[c] if split else math.nan,
             "share": split.shares[c] if split else math.nan} for c in CATEGORIES]
    df = pd.DataFrame(rows, columns=["category", "seconds", "share"])
    top = split.top_line if split is not None else None
    df.attrs["top_line"] = None if top is None else {k: top[k] for k in ("line", "text", "share")}
    df.attrs["samples"] = split.samples if split else 0
    return df


# -- one StackSamples per sampler ----------------------------------------------------------
_by_sampler: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


def samples_of(sampler: object, create: bool = False) -> StackSamples | None:
    """The stack samples kept for ``sampler`` (made with ``create``; None if none)."""
    given = getattr(sampler, "stack_samples", None)  # a replay carries its recording's
    if isinstance(given, StackSamples):
        return given
    with _registry_lock:
        got = _by_sampler.get(sampler)
        if create:
            from ..config import settings

            hz = float(settings().stack_samples_hz)
            if got is None:
                got = _by_sampler[sampler] = StackSamples(hz)
            elif hz != got.hz:  # %config NbGpu.stack_samples_hz changed since
                got.hz, got.period_s = hz, 1.0 / hz if hz > 0 else math.inf
        return got


def _anchor(frame):
    """The frame just outside the block: the caller's first frame outside nbgpu, then its caller."""
    f = frame
    while f is not None and file_kind(f.f_code.co_filename)[0] == NBGPU:
        f = f.f_back
    return f.f_back if f is not None else None


def hold(sampler: object, line_offset: int = 0) -> int | None:
    """Start sampling the calling thread's stack on ``sampler``'s thread; a token for ``release``
    (None when ``NbGpu.stack_samples_hz`` is 0). ``line_offset``: 1 under a ``%%gpumon`` line."""
    got = samples_of(sampler, create=True)
    if got is None or not math.isfinite(got.period_s) or not callable(getattr(sampler, "add_listener", None)):
        return None
    anchor = _anchor(sys._getframe(1))
    with _registry_lock:
        if not got._holders:
            now = sampler.now() if callable(getattr(sampler, "now", None)) else 0.0
            got._trim(now - KEEP_S)
            sampler.add_listener(got)
        got._token += 1
        got._holders[got._token] = got._holder = (threading.get_ident(), anchor, int(line_offset))
        return got._token


def release(sampler: object, token: int | None) -> None:
    """Stop the sampling ``hold`` started; the sampler's listener goes with the last holder."""
    got = samples_of(sampler)
    if got is None or token is None:
        return
    with _registry_lock:
        got._holders.pop(token, None)
        got._holder = next(reversed(got._holders.values()), None)  # the innermost block left
        got._cell = (None, None)  # no frame kept past its block
        if not got._holders:
            sampler.remove_listener(got)
