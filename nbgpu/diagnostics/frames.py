"""What the main thread was doing: one stack sample's category (a ``torch.utils.data`` frame on the
way up, else the innermost frame's, cached) and its cell line (the outermost frame of user code)."""

from __future__ import annotations

import os
import re
import sys
import sysconfig

CATEGORIES = ("gpu_wait", "data_loader", "h2d_copy", "gpu_issue", "cpu", "idle")
CODE = {c: i for i, c in enumerate(CATEGORIES)}
LOADER_CODE = CODE["data_loader"]

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
_walk: dict[str, int] = {}  # what ``classify``'s walk needs of a file: USER, STOP, _LOADER or LIB


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
    import linecache

    return linecache.getline(filename, lineno).strip()


_loops: dict[str, list[tuple[int, int]]] = {}


def loop_of(filename: str, lineno: int, offset: int = 0) -> tuple[int, str] | None:
    """(line + ``offset``, text) of the innermost loop around ``lineno`` of a file in ``linecache``."""
    import ast
    import linecache

    if (spans := _loops.get(filename)) is None:
        try:
            tree = ast.parse("".join(linecache.getlines(filename)))
            spans = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree)
                     if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]
        except (SyntaxError, ValueError):
            spans = []
        if len(_loops) > 1000:
            _loops.clear()
        _loops[filename] = spans
    inside = [first for first, last in spans if first <= lineno <= last]
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
