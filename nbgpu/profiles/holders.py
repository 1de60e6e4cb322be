"""Where is my memory: the names of a namespace that hold device tensors, largest first.

The walk reads only ``__dict__``/slots through the C-level descriptors and the items of
builtin containers, so no property, ``__getattr__`` or user ``__iter__`` runs. Torch is
never imported here: with none imported, nothing can hold a tensor.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

CAP = 10_000  # items visited per container
BUDGET = 200_000  # objects visited per holder, so nested huge containers stay bounded
COLUMNS = ["name", "kind", "bytes", "tensors", "shared_with", "hidden", "note"]
UNREACHABLE = "not reachable from a name"
RESERVED_FREE = "reserved but free"
_SKIP_MODULES = ("IPython", "ipykernel", "traitlets", "zmq", "tornado", "asyncio", "jupyter_client")
_HIDDEN_NAMES = ("_", "__", "___")
_SKIP_NAMES = {"In", "Out", "_oh", "_ih", "_dh", "_i", "_ii", "_iii", "exit", "quit", "get_ipython"}
_ALIAS = re.compile(r"_i{0,3}\d+$")


@dataclass
class _Found:
    """What one holder reaches: storage key -> (bytes, part)."""

    storages: dict[tuple, tuple[int, str]] = field(default_factory=dict)
    tensors: int = 0
    capped: bool = False
    visited: int = 0


def _dict_of(obj: object) -> dict | None:
    """``obj.__dict__`` through the C descriptor only (never a property or ``__getattribute__``)."""
    for klass in type(obj).__mro__:
        desc = klass.__dict__.get("__dict__")
        if desc is not None:
            if isinstance(desc, types.GetSetDescriptorType):
                try:
                    d = desc.__get__(obj, type(obj))
                except Exception:  # an odd object holds nothing we can see
                    return None
                return d if isinstance(d, dict) else None
            return None
    return None


def _slots_of(obj: object) -> Iterator[object]:
    for klass in type(obj).__mro__:
        for value in klass.__dict__.values():
            if isinstance(value, types.MemberDescriptorType):
                try:
                    yield value.__get__(obj, type(obj))
                except Exception:  # an unset slot
                    continue


def _frames(tb: object) -> Iterator[types.FrameType]:
    seen = 0
    while isinstance(tb, types.TracebackType) and seen < 1000:
        yield tb.tb_frame
        tb, seen = tb.tb_next, seen + 1


def _frame_name(frame: types.FrameType) -> str:
    name = frame.f_code.co_name
    return "cell" if name == "<module>" else name


class _Walker:
    """Collects device storages reachable from one holder, to a bounded depth."""

    def __init__(self, torch: Any, device: Any, depth: int, skip: set[int]) -> None:
        self.torch, self.device, self.depth, self.skip = torch, device, depth, skip
        self.optim = getattr(getattr(torch, "optim", None), "Optimizer", None)
        self.module = getattr(getattr(torch, "nn", None), "Module", None)

    def _on_device(self, t: Any) -> bool:
        d = t.device
        if d.type != self.device.type:
            return False
        return self.device.index is None or d.index == self.device.index

    def _tensor(self, t: Any, found: _Found, part: str) -> None:
        tensor_t = self.torch.Tensor
        try:
            if not self._on_device(t):
                return
            st = t.untyped_storage()
            key, size = (t.device.type, t.device.index, st.data_ptr()), int(st.nbytes())
        except Exception:  # sparse, meta or odd tensors: nothing to count
            return
        found.tensors += 1
        found.storages.setdefault(key, (size, part))
        grad = tensor_t.grad.__get__(t) if part != "gradients" else None
        if grad is not None:
            self._tensor(grad, found, "gradients")

    def _items(self, obj: object, found: _Found) -> Iterator[object]:
        kind = type(obj)
        if issubclass(kind, dict):
            it: Iterator[object] = iter(dict.values(obj))
            n = dict.__len__(obj)
        elif issubclass(kind, (list, tuple)):
            base = list if issubclass(kind, list) else tuple
            it, n = base.__iter__(obj), base.__len__(obj)
        elif issubclass(kind, (set, frozenset)):
            base = set if issubclass(kind, set) else frozenset
            it, n = base.__iter__(obj), base.__len__(obj)
        else:
            return iter(())
        if n > CAP:
            found.capped = True
        return islice(it, CAP)

    def _module(self, m: object, found: _Found, seen: set[int]) -> None:
        stack, done = [m], set()
        while stack:
            mod = stack.pop()
            if id(mod) in done:
                continue
            done.add(id(mod))
            seen.add(id(mod))
            d = _dict_of(mod) or {}
            for attr, part in (("_parameters", "parameters"), ("_buffers", "buffers")):
                for t in dict.values(d.get(attr) or {}):
                    if t is not None and issubclass(type(t), self.torch.Tensor):
                        self._tensor(t, found, part)
            stack.extend(v for v in dict.values(d.get("_modules") or {}) if v is not None)

    def walk(self, obj: object, found: _Found, level: int = 0, seen: set[int] | None = None) -> None:
        """Add what ``obj`` holds to ``found``; cycles and repeats are visited once."""
        seen = set() if seen is None else seen
        if id(obj) in seen or id(obj) in self.skip or level > self.depth:
            return
        found.visited += 1
        if found.visited > BUDGET:
            found.capped = True
            return
        kind = type(obj)
        if issubclass(kind, self.torch.Tensor):
            self._tensor(obj, found, "tensors")
            return
        if obj is None or issubclass(kind, (str, bytes, int, float, complex, bool, type,
                                            types.ModuleType, types.FunctionType)):
            return
        if str(getattr(kind, "__module__", "")).startswith(_SKIP_MODULES):
            return
        seen.add(id(obj))
        if self.module is not None and issubclass(kind, self.module):
            self._module(obj, found, seen)
            return
        if self.optim is not None and issubclass(kind, self.optim):
            state = (_dict_of(obj) or {}).get("state")
            children: Iterator[object] = self._items(state, found) if isinstance(state, dict) else iter(())
        elif issubclass(kind, (dict, list, tuple, set, frozenset)):
            children = self._items(obj, found)
        elif issubclass(kind, BaseException):
            d = _dict_of(obj) or {}
            tb = BaseException.__traceback__.__get__(obj)
            args = BaseException.args.__get__(obj)
            children = iter([*d.values(), args, *(_locals(f) for f in _frames(tb))])
        else:
            d = _dict_of(obj)
            children = iter([*(self._items(d, found) if d is not None else ()), *_slots_of(obj)])
        for child in children:
            self.walk(child, found, level + 1, seen)


def _locals(frame: types.FrameType) -> dict:
    try:
        return dict(frame.f_locals)
    except Exception:  # a frame whose locals cannot be read
        return {}


def _holders(ns: dict) -> Iterator[tuple[str, object, bool]]:
    """(name, value, hidden) for every holder: names, the output cache, the last error."""
    for name, value in list(ns.items()):
        if name in _SKIP_NAMES or _ALIAS.match(name):
            continue
        yield name, value, name in _HIDDEN_NAMES
    out = ns.get("Out")
    if isinstance(out, dict):
        for n, value in list(out.items()):
            yield f"Out[{n}]", value, True
    last_tb = getattr(sys, "last_traceback", None)
    for frame in _frames(last_tb):
        if (frame.f_globals is ns and frame.f_code.co_name == "<module>") or _is_internal(frame):
            continue
        for local, value in _locals(frame).items():
            yield f"{_frame_name(frame)}: {local} (traceback)", value, True
    value = getattr(sys, "last_value", None)
    if issubclass(type(value), BaseException):  # its frames are listed above, local by local
        yield "sys.last_value", _Shallow(value), True


class _Shallow:
    """An exception's own attributes and args, without its traceback's frames."""

    def __init__(self, exc: BaseException) -> None:
        self.name = type(exc).__name__
        self.held = [_dict_of(exc) or {}, BaseException.args.__get__(exc)]


def _is_internal(frame: types.FrameType) -> bool:
    module = str(frame.f_globals.get("__name__", ""))
    return module.startswith(_SKIP_MODULES)


def _user_ns(namespace: dict | None) -> dict:
    if namespace is not None:
        return namespace
    ipy = sys.modules.get("IPython")
    shell = ipy.get_ipython() if ipy is not None else None
    if shell is not None:
        return shell.user_ns
    import __main__

    return vars(__main__)


def _kind(value: object, found: _Found, torch: Any) -> str:
    if isinstance(value, _Shallow):
        return f"{value.name} holding {found.tensors} tensor{'s' if found.tensors != 1 else ''}"
    if issubclass(type(value), torch.Tensor):
        return f"tensor {str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}"
    if isinstance(value, types.FrameType):
        return "frame"
    parts: dict[str, int] = {}
    for size, part in found.storages.values():
        parts[part] = parts.get(part, 0) + size
    name = type(value).__name__
    if set(parts) - {"tensors"}:
        from ..units import fmt_bytes

        detail = ", ".join(f"{p} {fmt_bytes(parts.get(p, 0))}" for p in ("parameters", "gradients", "buffers")
                           if p in parts or p != "gradients")
        return f"{name}: {detail}"
    if type(value).__name__ in ("list", "tuple", "dict", "set", "frozenset"):
        return f"{name} of {found.tensors} tensor{'s' if found.tensors != 1 else ''}"
    return f"{name} holding {found.tensors} tensor{'s' if found.tensors != 1 else ''}"


def memory_by_name(device: str = "cuda", namespace: dict | None = None, depth: int = 3):
    """The names that hold ``device`` memory, largest first, as a pandas DataFrame.

    Storages shared by views or names count once (``shared_with`` says by whom); hidden
    holders are the output cache and the last traceback. On CUDA the last two rows are the
    memory no name reaches and what PyTorch reserved but does not use.
    """
    import pandas as pd

    torch = sys.modules.get("torch")
    if torch is None:
        return pd.DataFrame(columns=COLUMNS)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        from ..errors import BadArgumentError

        raise BadArgumentError(f"device must be like 'cuda', 'cuda:1' or 'cpu', got {device!r}") from None
    ns = _user_ns(namespace)
    walker = _Walker(torch, dev, max(0, int(depth)), {id(ns)})
    rows: list[tuple[str, object, bool, _Found]] = []
    for name, value, hidden in _holders(ns):
        found = _Found()
        try:
            walker.walk(value.held if isinstance(value, _Shallow) else value, found)
        except RecursionError:
            found.capped = True
        if found.storages:
            rows.append((name, value, hidden, found))
    owners: dict[tuple, list[str]] = {}
    for name, _, _, found in rows:
        for key in found.storages:
            owners.setdefault(key, []).append(name)
    table = []
    for name, value, hidden, found in rows:
        shared = sorted({o for key in found.storages for o in owners[key] if o != name})
        notes = [f"capped: {CAP:,} items per container, {BUDGET:,} objects"] if found.capped else []
        if len(found.storages) < found.tensors:
            notes.append("views share storage, counted once")
        table.append({"name": name, "kind": _kind(value, found, torch),
                      "bytes": sum(s for s, _ in found.storages.values()), "tensors": found.tensors,
                      "shared_with": ", ".join(shared), "hidden": hidden, "note": "; ".join(notes)})
    table.sort(key=lambda r: (-r["bytes"], r["name"]))
    if dev.type == "cuda" and torch.cuda.is_available():
        named = sum(sizes[0] for key, sizes in _union(rows).items())
        allocated, reserved = torch.cuda.memory_allocated(dev), torch.cuda.memory_reserved(dev)
        table.append({"name": UNREACHABLE, "kind": "autograd graphs, caches, other threads",
                      "bytes": max(0, allocated - named), "tensors": 0, "shared_with": "",
                      "hidden": True, "note": ""})
        table.append({"name": RESERVED_FREE, "kind": "PyTorch's caching allocator",
                      "bytes": max(0, reserved - allocated), "tensors": 0, "shared_with": "",
                      "hidden": True, "note": "torch.cuda.empty_cache() returns it"})
    return pd.DataFrame(table, columns=COLUMNS)


def _union(rows: list) -> dict[tuple, tuple[int, str]]:
    merged: dict[tuple, tuple[int, str]] = {}
    for *_, found in rows:
        merged.update(found.storages)
    return merged
