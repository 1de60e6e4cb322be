"""Where is my memory: the names of a namespace that hold device tensors, largest first."""

from __future__ import annotations

import contextlib
import gc
import re
import sys
import types
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from .errors import BadArgumentError
from .peaks import torch_cuda, torch_uuid
from .units import fmt_bytes

CAP = 10_000  # items visited per container
BUDGET = 200_000  # objects visited per holder, so nested huge containers stay bounded
COLUMNS = ["name", "kind", "bytes", "tensors", "shared_with", "hidden", "note"]
UNREACHABLE = "not reachable from a name"
RESERVED_FREE = "reserved but free"
_SKIP_MODULES = ("IPython", "ipykernel", "traitlets", "zmq", "tornado", "asyncio", "jupyter_client")
_HIDDEN_NAMES = ("_", "__", "___")
_SKIP_NAMES = {"In", "Out", "_oh", "_ih", "_dh", "_i", "_ii", "_iii", "exit", "quit", "get_ipython"}
_ALIAS = re.compile(r"_i{0,3}\d+$")


@dataclass(slots=True)
class _Found:
    """What one holder reaches: storage key -> (bytes, part)."""

    storages: dict[tuple, tuple[int, str]] = field(default_factory=dict)
    tensors: int = 0
    capped: bool = False
    visited: int = 0

    def over_budget(self, more: int) -> bool:
        """Count ``more`` objects looked at; True (and capped) once past ``BUDGET``."""
        self.visited += more
        self.capped = self.capped or self.visited > BUDGET
        return self.visited > BUDGET


_LEAF_TYPES = (str, bytes, int, float, complex, type, types.ModuleType, types.FunctionType, type(None))


def _dict_descriptor(kind: type) -> types.GetSetDescriptorType | None:
    desc = next((k.__dict__["__dict__"] for k in kind.__mro__ if "__dict__" in k.__dict__), None)
    return desc if isinstance(desc, types.GetSetDescriptorType) else None


def _dict_of(obj: object, desc: object = ...) -> dict | None:
    """``obj.__dict__`` through the C descriptor only (never a property or ``__getattribute__``)."""
    desc = _dict_descriptor(type(obj)) if desc is ... else desc
    try:
        d = desc.__get__(obj, type(obj)) if desc is not None else None
    except Exception:  # an odd object holds nothing we can see
        return None
    return d if issubclass(type(d), dict) else None


def _slot_descriptors(kind: type) -> tuple:
    return tuple(v for klass in kind.__mro__ for v in klass.__dict__.values()
                 if isinstance(v, types.MemberDescriptorType))


def _read_slots(descs: tuple, obj: object) -> list[object]:
    out = []
    for desc in descs:
        with contextlib.suppress(Exception):  # an unset slot
            out.append(desc.__get__(obj, type(obj)))
    return out


def _frames(tb: object) -> Iterator[types.FrameType]:
    seen = 0
    while type(tb) is types.TracebackType and seen < 1000:
        yield tb.tb_frame
        tb, seen = tb.tb_next, seen + 1


class _Walker:
    """Collects device storages reachable from one holder, to a bounded depth."""

    def __init__(self, torch: Any, device: Any, depth: int, skip: set[int]) -> None:
        self.torch, self.device, self.depth, self.skip = torch, device, depth, skip
        self.optim = getattr(getattr(torch, "optim", None), "Optimizer", None)
        self.module = getattr(getattr(torch, "nn", None), "Module", None)
        self.kinds: dict[type, tuple] = {}

    def _classify(self, kind: type) -> tuple:
        if issubclass(kind, self.torch.Tensor):
            return ("tensor",)
        if issubclass(kind, _LEAF_TYPES) or str(getattr(kind, "__module__", "")).startswith(_SKIP_MODULES):
            return ("leaf",)
        for base, name in ((self.module, "module"), (self.optim, "optim")):
            if base is not None and issubclass(kind, base):
                return (name,)
        for base in (dict, list, tuple, set, frozenset):
            if issubclass(kind, base):
                return ("items", base)
        if issubclass(kind, BaseException):
            return ("exception",)
        return ("object", _dict_descriptor(kind), _slot_descriptors(kind))

    def _on_device(self, t: Any) -> bool:
        want = self.device
        if want.type == "cuda":
            return t.is_cuda and (want.index is None or t.get_device() == want.index)
        d = t.device
        return d.type == want.type and (want.index is None or d.index == want.index)

    def _tensor(self, t: Any, found: _Found, part: str) -> None:
        try:
            if not self._on_device(t):
                return
            st = t.untyped_storage()
            key, size = (t.device.type, t.device.index, st.data_ptr()), int(st.nbytes())
        except Exception:  # sparse, meta or odd tensors: nothing to count
            return
        found.tensors += 1
        found.storages.setdefault(key, (size, part))
        grad = self.torch.Tensor.grad.__get__(t) if part != "gradients" else None
        if grad is not None:
            self._tensor(grad, found, "gradients")

    @staticmethod
    def _items(obj: object, base: type, found: _Found) -> list[object]:
        """Up to ``CAP`` items, copied (again if another thread changed its size meanwhile)."""
        if base.__len__(obj) > CAP:
            found.capped = True
        for _ in range(3):
            try:
                return list(islice(dict.values(obj) if base is dict else base.__iter__(obj), CAP))
            except RuntimeError:  # "dictionary changed size during iteration"
                continue
        found.capped = True
        return []

    def _module(self, m: object, found: _Found, seen: set[int]) -> None:
        """A module's parameters and buffers, and its submodules' (each once), to any depth."""
        stack = [m]
        while stack:
            d = _dict_of(stack.pop()) or {}
            for attr, part in (("_parameters", "parameters"), ("_buffers", "buffers")):
                for t in list(dict.values(d.get(attr) or {})):
                    if t is not None and issubclass(type(t), self.torch.Tensor):
                        self._tensor(t, found, part)
            for sub in list(dict.values(d.get("_modules") or {})):
                if sub is not None and id(sub) not in seen:
                    seen.add(id(sub))
                    stack.append(sub)

    def walk(self, obj: object, found: _Found, level: int = 0, seen: set[int] | None = None) -> None:
        """Add what ``obj`` holds to ``found``; cycles and repeats are visited once."""
        seen = set() if seen is None else seen
        if id(obj) in seen or id(obj) in self.skip or level > self.depth or found.over_budget(1):
            return
        kind = type(obj)
        what = self.kinds.get(kind) or self.kinds.setdefault(kind, self._classify(kind))
        tag = what[0]
        if tag == "tensor":
            self._tensor(obj, found, "tensors")
            return
        if tag == "leaf":
            return
        seen.add(id(obj))
        if tag == "module":
            self._module(obj, found, seen)
            return
        if tag == "optim":
            state = (_dict_of(obj) or {}).get("state")
            children = self._items(state, dict, found) if issubclass(type(state), dict) else []
        elif tag == "items":
            children = self._items(obj, what[1], found)
        elif tag == "exception":
            d = _dict_of(obj) or {}
            tb = BaseException.__traceback__.__get__(obj)
            args = BaseException.args.__get__(obj)
            children = [*list(dict.values(d)), args, *(_locals(f) for f in _frames(tb))]
        else:
            d = _dict_of(obj, what[1])
            children = [*(self._items(d, dict, found) if d is not None else ()), *_read_slots(what[2], obj)]
        if found.over_budget(len(children)):  # every item looked at counts, leaves too
            return
        kinds = self.kinds
        for child in children:
            known = kinds.get(type(child))
            if known is not None and known[0] == "leaf":
                continue
            self.walk(child, found, level + 1, seen)


def _locals(frame: types.FrameType) -> dict:
    try:
        return dict(frame.f_locals)
    except Exception:  # a frame whose locals cannot be read
        return {}


def _holders(ns: dict, error: BaseException | None = None) -> Iterator[tuple[str, object, str]]:
    """(name, value, group) for every holder; group is "name", "outputs" (the output cache) or
    "traceback" (the frames and exception of ``error``, else of ``sys.last_traceback``)."""
    for name, value in list(ns.items()):
        if name in _SKIP_NAMES or _ALIAS.match(name):
            continue
        yield name, value, "outputs" if name in _HIDDEN_NAMES else "name"
    out = ns.get("Out")
    if issubclass(type(out), dict):
        for n, value in list(dict.items(out)):
            yield f"Out[{n}]", value, "outputs"
    if error is not None:
        last_tb, value = BaseException.__traceback__.__get__(error), error
    else:
        last_tb, value = getattr(sys, "last_traceback", None), getattr(sys, "last_value", None)
    for frame in _frames(last_tb):
        if (frame.f_globals is ns and frame.f_code.co_name == "<module>") or _is_internal(frame):
            continue
        where = "cell" if frame.f_code.co_name == "<module>" else frame.f_code.co_name
        for local, held in _locals(frame).items():
            yield f"{where}: {local} (traceback)", held, "traceback"
    if issubclass(type(value), BaseException):  # its frames are listed above, local by local
        yield "sys.last_value", _Shallow(value), "traceback"


class _Shallow:
    """An exception's own attributes and args, without its traceback's frames."""

    def __init__(self, exc: BaseException) -> None:
        self.name = type(exc).__name__
        self.held = [_dict_of(exc) or {}, BaseException.args.__get__(exc)]


def _is_internal(frame: types.FrameType) -> bool:
    """A frame of IPython's or nbgpu's own machinery (``_run_body`` holds the namespace)."""
    module = str(frame.f_globals.get("__name__", ""))
    return module.startswith(_SKIP_MODULES) or f"{module}.".startswith("nbgpu.")


def _user_ns() -> dict:
    ipy = sys.modules.get("IPython")
    shell = ipy.get_ipython() if ipy is not None else None
    return shell.user_ns if shell is not None else vars(sys.modules["__main__"])


def _kind(value: object, found: _Found, torch: Any) -> str:
    if issubclass(type(value), torch.Tensor):
        return f"tensor {str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
    if type(value) is types.FrameType:
        return "frame"
    name = value.name if type(value) is _Shallow else type(value).__name__
    parts: Counter[str] = Counter()
    for size, part in found.storages.values():
        parts[part] += size
    if set(parts) - {"tensors"} and type(value) is not _Shallow:
        shown = [p for p in ("parameters", "gradients", "buffers") if p in parts or p != "gradients"]
        return f"{name}: " + ", ".join(f"{p} {fmt_bytes(parts[p])}" for p in shown)
    how = "of" if name in ("list", "tuple", "dict", "set", "frozenset") else "holding"
    return f"{name} {how} {found.tensors} tensor{'s' if found.tensors != 1 else ''}"


def memory_by_name(device: str = "cuda", namespace: dict | None = None, depth: int = 3,
                   error: BaseException | None = None):
    """The names that hold ``device`` ("cuda", "cuda:1", "cpu") memory, largest first, as a DataFrame
    (docs/profiles.md): ``namespace`` None walks IPython's user names (else ``__main__``), ``depth``
    containers deep; ``error``'s traceback stands for ``sys.last_traceback``."""
    import pandas as pd

    torch = sys.modules.get("torch")
    if torch is None:
        return pd.DataFrame(columns=COLUMNS)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise BadArgumentError(f"device must be like 'cuda', 'cuda:1' or 'cpu', got {device!r}") from None
    ns = _user_ns() if namespace is None else namespace
    walker = _Walker(torch, dev, max(0, int(depth)), {id(ns)})
    collecting = gc.isenabled()
    gc.disable()  # the walk's short-lived lists would start dozens of collections, and a full one
    try:
        rows = [(name, value, group, found) for name, value, group in _holders(ns, error)
                if (found := _walk(walker, value)) is not None]
    finally:
        if collecting:
            gc.enable()
    owners: dict[tuple, list[str]] = {}
    for name, _, _, found in rows:
        for key in found.storages:
            owners.setdefault(key, []).append(name)
    table = []
    for name, value, group, found in rows:
        shared = sorted({o for key in found.storages for o in owners[key] if o != name})
        notes = [f"capped: {CAP:,} items per container, {BUDGET:,} objects"] if found.capped else []
        if len(found.storages) < found.tensors:
            notes.append("views share storage, counted once")
        table.append({"name": name, "kind": _kind(value, found, torch),
                      "bytes": sum(s for s, _ in found.storages.values()), "tensors": found.tensors,
                      "shared_with": ", ".join(shared), "hidden": group != "name", "note": "; ".join(notes)})
    table.sort(key=lambda r: (-r["bytes"], r["name"]))
    named = sum(size for size, _ in _union(rows).values())
    if dev.type == "cuda" and torch.cuda.is_available():
        allocated, reserved = torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)
        for name, kind, size, note in (
                (UNREACHABLE, "autograd graphs, caches, other threads", allocated - named, ""),
                (RESERVED_FREE, "PyTorch's caching allocator", reserved - allocated,
                 "torch.cuda.empty_cache() returns it")):
            table.append({"name": name, "kind": kind, "bytes": max(0, size), "tensors": 0,
                          "shared_with": "", "hidden": True, "note": note})
    frame = pd.DataFrame(table, columns=COLUMNS)
    frame.attrs.update(named_bytes=named, freed_by=_freed_by(rows))
    return frame


def _walk(walker: _Walker, value: object) -> _Found | None:
    """What ``value`` holds; None when nothing (a known leaf, most names, is not walked at all)."""
    known = walker.kinds.get(type(value))
    if known is not None and known[0] == "leaf":
        return None
    found = _Found()
    try:
        walker.walk(value.held if type(value) is _Shallow else value, found)
    except RecursionError:
        found.capped = True
    return found if found.storages else None


def _freed_by(rows: list) -> dict[str, int]:
    """Bytes no name holds, held by the output cache, the traceback, or either."""
    kept = _union(r for r in rows if r[2] == "name")
    groups = {"outputs": {"outputs"}, "traceback": {"traceback"}, "all_hidden": {"outputs", "traceback"}}
    return {what: sum(size for key, (size, _) in _union(r for r in rows if r[2] in g).items()
                      if key not in kept) for what, g in groups.items()}


def _union(rows: Iterable) -> dict[tuple, tuple[int, str]]:  # storage -> (bytes, part), once each
    return {key: v for *_, found in rows for key, v in found.storages.items()}


def cuda_device(uuid: str = "", index: int | None = None) -> str | None:
    """The torch device ("cuda:1") of an NVML GPU, by UUID, else by ``index``; None when the
    user's torch never started CUDA (nothing is imported or started here)."""
    cuda = torch_cuda()
    if cuda is None:
        return None
    want = uuid.lower().removeprefix("gpu-")
    try:
        for i in range(cuda.device_count() if want else 0):
            if torch_uuid(cuda, i).lower().removeprefix("gpu-") == want:
                return f"cuda:{i}"
    except Exception:  # a CUDA that cannot say: match by index only
        pass
    return None if index is None else f"cuda:{index}"


def top_holders(device: str, n: int = 3, error: BaseException | None = None) -> tuple[list[dict], dict]:
    """The ``n`` largest named rows of ``memory_by_name(device)`` and its ``attrs``; nothing
    (``[], {}``) when torch is not imported or the walk fails (a report must still show)."""
    try:
        frame = memory_by_name(device=device, error=error)
    except Exception:
        return [], {}
    rows = [r for r in frame.to_dict("records") if r["name"] not in (UNREACHABLE, RESERVED_FREE)]
    return rows[:n], dict(frame.attrs)


def holder_line(row: dict) -> str:
    """One holder for a person: "`blocks`: list of 17 tensors, 136.0 GiB"."""
    shared = f", shared with {row['shared_with']}" if row.get("shared_with") else ""
    return f"`{row['name']}`: {row['kind']}, {fmt_bytes(row['bytes'])}{shared}"


def release_line(rows: list[dict], freed_by: dict) -> str:
    """What ``%gpumon free --traceback`` gives back, and the names to add where it is nothing."""
    traceback = [r for r in rows if r["name"].endswith("(traceback)") or r["name"] == "sys.last_value"]
    if not traceback or "traceback" not in freed_by:
        return ""
    got = freed_by["traceback"]
    if got > 0:
        return f"`%gpumon free --traceback` gives back {fmt_bytes(got)} (the failed cell's locals)"
    partners = sorted({p.strip() for r in traceback for p in str(r["shared_with"]).split(",")
                       if p.strip() and "(traceback)" not in p and not p.startswith(("Out[", "_"))})
    names = " ".join(partners) if partners else "NAME"
    return (f"`%gpumon free --traceback` alone gives back nothing: names hold the same tensors "
            f"(`%gpumon free {names} --traceback` releases them)")
