"""Where the main thread was: while a capture is open, the sampler's thread samples the capturing
thread's stack ``NbGpu.stack_samples_hz`` times a second into a lock-free deque (compact arrays now
and then). A sample's category: a ``torch.utils.data`` frame on the way up, else the innermost
frame's (cached); its cell line: the outermost frame of user code, its text read when asked."""

from __future__ import annotations

import ast
import functools
import linecache
import math
import os
import re
import sys
import sysconfig
import threading
import weakref
from array import array
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .window import hold_weights

CATEGORIES = ("gpu_wait", "data_loader", "h2d_copy", "gpu_issue", "cpu", "idle")
CODE = {c: i for i, c in enumerate(CATEGORIES)}
LOADER_CODE = CODE["data_loader"]
LABELS = {"gpu_wait": "waiting for the GPU", "data_loader": "data loader",
          "h2d_copy": "copies to the GPU", "gpu_issue": "issuing GPU work", "cpu": "other CPU work",
          "idle": "sleep, I/O, locks"}
COLORS = {"gpu_wait": "#d62728", "data_loader": "#ff7f0e", "h2d_copy": "#9467bd",
          "gpu_issue": "#1f77b4", "cpu": "#2ca02c", "idle": "#bbbbbb"}

# -- where a file belongs ------------------------------------------------------------------
USER, LIB, STDLIB, TORCH, NBGPU, STOP = range(6)
_NBGPU_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_SITE = tuple({p + os.sep for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])})
_STD = tuple({p + os.sep for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])})
_STOP_FILE = "IPython/core/interactiveshell.py"  # above it: the kernel's own machinery
_IDLE_STD = ("threading.py", "queue.py", "selectors.py", "socket.py", "ssl.py", "subprocess.py",
             "socketserver.py", "multiprocessing/", "asyncio/", "concurrent/", "http/", "urllib/")
_kinds: dict[str, tuple[int, str]] = {}
_LOADER = -1
_walk: dict[str, int] = {}  # what ``walk_up`` needs of a file: USER, STOP, _LOADER or LIB


def file_kind(filename: str) -> tuple[int, str]:
    """(USER | LIB | STDLIB | TORCH | NBGPU | STOP, path inside torch or the stdlib)."""
    if (got := _kinds.get(filename)) is not None:
        return got
    path = filename.replace("\\", "/")
    got = (USER, "")
    if filename.startswith(_NBGPU_DIR):
        got = (NBGPU, "")
    elif path.endswith(_STOP_FILE):
        got = (STOP, "")
    elif "/torch/" in path and (filename.startswith(_SITE) or "site-packages" in path):
        got = (TORCH, path.rsplit("/torch/", 1)[1])
    elif filename.startswith(_SITE) or "site-packages/" in path or "dist-packages/" in path:
        got = (LIB, "")
    elif filename.startswith(_STD):
        got = (STDLIB, path[len(next(s for s in _STD if filename.startswith(s))):])
    elif filename.startswith("<frozen"):
        got = (STDLIB, filename)
    if len(_kinds) < 100_000:
        _kinds[filename] = got
        _walk[filename] = (_LOADER if got[0] == TORCH and got[1].startswith("utils/data/")
                           else got[0] if got[0] in (USER, STOP) else LIB)
    return got


# -- what a line or a frame is doing -----------------------------------------------------
_HOST_READS = frozenset({"item", "tolist", "numpy", "cpu", "__repr__", "__format__", "__str__",
                         "__array__", "__float__", "__int__", "__bool__", "__index__"})
_WAIT = re.compile(r"\.(item|cpu|tolist|numpy)\(|synchroni[sz]e\(|\.to\(\s*['\"]cpu")
_H2D = re.compile(r"\.(cuda|copy_|pin_memory)\(|\.to\((?!\s*(dtype\s*=|torch\.(float|half|bfloat|int|double"
                  r"|long|bool|uint|complex)))")
_IDLE = re.compile(r"\b(sleep|input|urlopen|select|recv|recvfrom|read|readline|readlines|wait"
                   r"|acquire|communicate|accept)\(|\bopen\(|\.join\(\s*(\)|timeout)")  # not ", ".join(...)
_TORCH = re.compile(r"\btorch\.|\bF\.|\.(backward|step|zero_grad|forward)\(")
_NAMES = re.compile(r"[A-Za-z_]\w*")
_inner: dict[int, tuple] = {}  # id(code) -> (code, {f_lasti: CODE})


def torch_category(rel: str, name: str) -> str:
    """The category of a frame inside torch (``rel``: its path under ``torch/``)."""
    if rel.startswith("utils/data/"):
        return "data_loader"
    if "synchroni" in name or rel.startswith("_tensor_str") or (rel == "_tensor.py" and name in _HOST_READS):
        return "gpu_wait"
    if rel == "nn/modules/module.py" and name in ("to", "cuda", "_apply", "convert"):
        return "h2d_copy"
    return "gpu_issue"


def line_category(text: str, frame=None) -> str:
    """The category of a C call made from a user line of ``text`` (in ``frame``, if given)."""
    code = text.split("#", 1)[0]
    if _WAIT.search(code):
        return "gpu_wait"
    if _H2D.search(code):
        return "h2d_copy"
    if _IDLE.search(code):
        return "idle"
    if _TORCH.search(code):
        return "gpu_issue"
    bound = _bound_to(code, frame)
    if "torch" in bound:  # float(loss), print(loss): a tensor read on the host
        return "gpu_wait" if re.search(r"\b(float|int|bool|print)\(", code) else "gpu_issue"
    if "@" in code and not bound and "torch" in sys.modules:
        return "gpu_issue"
    return "cpu"


def _bound_to(code: str, frame) -> set[str]:
    """Top-level packages of the objects the names of ``code`` are bound to in ``frame``."""
    if frame is None:
        return set()
    out, spaces = set(), (frame.f_locals, frame.f_globals)
    for name in set(_NAMES.findall(code)):
        for space in spaces:
            if name in space:
                module = getattr(type(space[name]), "__module__", "") or ""
                if module.startswith("torch"):
                    out.add("torch")
                elif module.split(".")[0] in ("numpy", "pandas", "builtins"):
                    out.add(module.split(".")[0])
                break
    return out


def line_text(filename: str, lineno: int) -> str:
    return linecache.getline(filename, lineno).strip()


@functools.lru_cache(maxsize=1000)
def _loop_spans(filename: str) -> list[tuple[int, int]]:
    """(first, last line) of each loop of a file in ``linecache``."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return []
    return [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
            if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]


def loop_of(filename: str, lineno: int, offset: int = 0) -> tuple[int, str] | None:
    """(line + ``offset``, text) of the innermost loop around ``lineno`` of a file in ``linecache``."""
    inside = [first for first, last in _loop_spans(filename) if first <= lineno <= last]
    return (max(inside) + offset, line_text(filename, max(inside))) if inside else None


def inner_code(frame) -> int:
    """``CODE`` of the innermost frame's category, cached per code object (kept, so its id is
    never reused while cached) and instruction."""
    code = frame.f_code
    per = _inner.get(id(code))
    if per is not None and per[0] is code:
        if (got := per[1].get(frame.f_lasti)) is not None:
            return got
    else:
        if len(_inner) > 20_000:
            _inner.clear()
        per = _inner[id(code)] = (code, {})
    kind, rel = file_kind(code.co_filename)
    if kind == TORCH:
        got = torch_category(rel, code.co_name)
    elif kind == STDLIB:
        got = "idle" if rel.startswith(_IDLE_STD) or code.co_name in ("sleep", "wait", "select") else "cpu"
    elif kind == USER:  # once per distinct instruction: the line's text and the frame's names
        got = line_category(line_text(code.co_filename, frame.f_lineno or 0), frame)
    else:
        got = "cpu"
    per[1][frame.f_lasti] = CODE[got]
    return CODE[got]


def walk_up(frame, anchor, known=None):
    """(the outermost user frame or None, whether a data-loader frame is on the way) from
    ``frame`` up to ``anchor`` or IPython's ``run_code``; ``known``: that frame as an earlier
    walk of the same block found it, where the walk ends."""
    loader = False
    cell_frame = None
    walk = _walk
    f = frame
    while f is not None and f is not anchor:
        if f is known:
            return f, loader
        name = f.f_code.co_filename
        kind = walk.get(name)
        if kind is None:
            file_kind(name)
            kind = walk.get(name, LIB)
        if kind == USER:
            cell_frame = f
        elif kind == _LOADER:
            loader = True
        elif kind == STOP:
            break
        f = f.f_back
    return cell_frame, loader


def classify(frame, anchor=None) -> tuple[str, tuple[str, int] | None]:
    """(category, (file, line) of the outermost user frame or None) of a stack's innermost ``frame``."""
    cell_frame, loader = walk_up(frame, anchor)
    lineno = None if cell_frame is None else cell_frame.f_lineno  # None mid-instruction on 3.12+
    cell = None if lineno is None else (cell_frame.f_code.co_filename, lineno)
    return ("data_loader" if loader else CATEGORIES[inner_code(frame)]), cell


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
    if not math.isfinite(got.period_s):
        return None
    anchor = _anchor(sys._getframe(1))
    with _registry_lock:
        if not got._holders:
            got._trim(sampler.now() - KEEP_S)
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
