"""The options the ``nbgpu`` command and ``%gpumon`` share (``SHARED``, added with ``add_shared``)
and ``OnceParser``, which refuses an option given twice. Nothing here imports IPython."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
from collections.abc import Callable, Iterator, Sequence
from importlib import import_module

from ..errors import BadArgumentError

SOURCES = "auto, nvml, sim, sim:N (N simulated GPUs) or prometheus=URL"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: str) -> str:
    """``text`` safe to print: non-UTF-8 bytes and control characters as ``\\xNN`` (newlines, tabs kept)."""
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no file name gives
        raw = text.encode("utf-8", "backslashreplace")
    text = raw.decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def check_source(text: str) -> str:
    """A ``--source`` value (``auto``, ``nvml``, ``sim``, ``sim:N``, ``prometheus=URL``), else an error."""
    from ..sources import sim_count

    spec = text.strip()
    prometheus = spec.startswith("prometheus=") and len(spec) > 11
    if spec in ("auto", "nvml") or prometheus or sim_count(spec) is not None:
        return spec
    raise BadArgumentError(f"unknown source {text!r}; use {SOURCES}")


def check_gpu_list(text: str) -> str:
    """A ``--gpus`` value: indices separated by commas, like ``0,2``."""
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items):
        raise BadArgumentError(f"gpus must be indices separated by commas, like 0,2; got {text!r}")
    return ",".join(items)


def argtype(check: Callable[[str], object]) -> Callable[[str], object]:
    """An argparse ``type`` from one of nbgpu's checks (its BadArgumentError becomes argparse's)."""
    def convert(text: str) -> object:
        try:
            return check(text)
        except BadArgumentError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return convert


def seconds(check: Callable[[float], float]) -> Callable[[str], object]:
    """An argparse ``type`` reading a number of seconds and checking it with ``check``."""
    def convert(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise BadArgumentError(f"expected a number of seconds, got {text!r}") from None
        return check(value)
    return argtype(convert)


# name: the argparse type, metavar and help of ``--name``; each command gives its own default.
SHARED: dict[str, dict] = {
    "source": {"type": argtype(check_source), "metavar": "SRC",
               "help": f"where readings come from: {SOURCES}"},
    # the sampler's own check; nbgpu.config (traitlets) is imported only when an interval is given
    "interval": {"type": seconds(lambda v: import_module("nbgpu.config").check_interval(v)), "metavar": "S",
                 "help": "seconds between sampler ticks, 0.01 to 3600"},
    "gpus": {"type": argtype(check_gpu_list), "metavar": "LIST", "help": "GPU indices to show, like 0,2"},
}


def add_shared(parser: argparse.ArgumentParser, name: str, default: object, default_text: str,
               note: str = "") -> None:
    """Add the shared option ``--name`` to ``parser`` with its own default (and a note for its help)."""
    text = f"{SHARED[name]['help']} (default: {default_text})" + (f". {note}" if note else "")
    parser.add_argument(f"--{name}", **{**SHARED[name], "help": text}, default=default)


def _once(base: type[argparse.Action]) -> type[argparse.Action]:
    """``base``, refusing a second option of the same ``dest`` in one command line."""
    class Once(base):  # type: ignore[misc, valid-type]
        def __call__(self, parser, namespace, values, option_string=None):
            given = namespace.__dict__.setdefault("_given", {})
            if option_string is not None:  # positionals: argparse counts them
                if self.dest in given:
                    first = given[self.dest]
                    twice = (f"{first} given twice" if first == option_string
                             else f"{first} and {option_string} given together")
                    parser.error(f"{twice}; give it once")
                given[self.dest] = option_string
            super().__call__(parser, namespace, values, option_string)
    return Once


class OnceParser(argparse.ArgumentParser):
    """argparse whose options may each be given once (the result's ``_given``: dest -> the flag used)
    and whose usage error is one line and exit code 2, not the whole usage text."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        store = _once(argparse._StoreAction)
        self.register("action", None, store)
        self.register("action", "store", store)
        self.register("action", "store_true", _once(argparse._StoreTrueAction))
        self.register("action", "store_false", _once(argparse._StoreFalseAction))

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """Inside the block, SIGTERM raises KeyboardInterrupt as Ctrl-C does (main thread only)."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def refuse_overwrite(output: str, inputs: Sequence[str]) -> None:
    """BadArgumentError when ``output`` would replace one of ``inputs`` (the same file, through any link)."""
    for path in inputs:
        with contextlib.suppress(OSError):  # an output that does not exist yet replaces nothing
            if os.path.samefile(output, path):
                raise BadArgumentError(f"the output {output} is the same file as the input {path}; "
                                       "give another output with -o")
