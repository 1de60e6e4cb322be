"""The options of ``%gpumon`` and ``%%gpumon``: every mistake is one ``UsageError`` line, and the
help text (``%gpumon?``) comes from the same parser."""

from __future__ import annotations

import argparse
import shlex

from IPython.core.error import UsageError

from ..cli.shared_options import OnceParser, add_shared, argtype, seconds
from ..config import check_seconds, check_window
from ..widgets.columns import COLUMNS, DEFAULT_REFRESH_S, DEFAULT_WINDOW_S, check_metrics, check_refresh

ACTIONS = ("start", "stop", "status")
RESTART_NOTE = "Changing it restarts the kernel's one sampler; open panels follow"


Options = argparse.Namespace  # what a %gpumon line asked for, as its parser names it; None: not given


class HelpRequestedError(Exception):
    """``-h``/``--help`` was given: the magic prints its help instead of running."""


class _Parser(OnceParser):
    """argparse that raises UsageError (one line) instead of printing and exiting."""

    def error(self, message: str):
        if message.startswith("unrecognized arguments"):
            allowed = ", ".join(sorted({s for a in self._actions for s in a.option_strings}))
            message += f"; allowed options: {allowed}"
        raise UsageError(f"{self.prog}: {message} (see {self.prog}?)")

    def print_help(self, file: object = None) -> None:
        raise HelpRequestedError(self.format_help())  # -h: the magic prints it and does nothing else


def _add_sampler_options(p: argparse.ArgumentParser) -> None:
    add_shared(p, "source", None, "what runs, else auto", RESTART_NOTE)
    add_shared(p, "interval", None, "what runs, else 1", RESTART_NOTE)
    add_shared(p, "gpus", None, "all")


def line_parser() -> argparse.ArgumentParser:
    """The parser of ``%gpumon`` (line magic)."""
    p = _Parser(prog="%gpumon", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Show a live panel of the GPUs (and host CPU/RAM), updating while "
                            "other cells run.\nAll panels share the kernel's one sampler thread.",
                epilog="Actions: start (default) opens a panel; stop stops the sampler and every "
                       "panel;\nstatus prints what runs. %gpumon memory lists the names that hold GPU "
                       "memory;\n%gpumon free NAME... [--outputs] [--traceback] [--all-hidden] "
                       "releases them.\n\n"
                       "Cell magic: %%gpumon [--source SRC] [--interval S] [--gpus LIST] profiles "
                       "the cell\nbelow it and shows its timeline and summary.\n\nMetrics (--metrics):\n"
                       + "\n".join(f"  {c.key:<10} {c.help}" for c in COLUMNS.values()))
    p.add_argument("action", nargs="?", default="start", choices=ACTIONS,
                   help="start (default), stop or status")
    _add_sampler_options(p)
    p.add_argument("--window", type=seconds(check_window), default=None, metavar="S",
                   dest="window_s", help=f"seconds of history shown, 5 to 86400 (default "
                                         f"{DEFAULT_WINDOW_S:g}); per panel")
    p.add_argument("--metrics", type=argtype(check_metrics), default=None, metavar="LIST",
                   help="columns to show, like util,mem,power,temp,sm (default: util, mem, power, "
                        "temp, plus sm where reported); per panel")
    p.add_argument("--refresh", type=seconds(check_refresh), default=None,
                   metavar="S", dest="refresh_s",
                   help=f"seconds between panel updates, 0.25 to 60 (default: as often as the "
                        f"lines can move, window / 38 s, from {DEFAULT_REFRESH_S:g} s to 5 s: 2 s "
                        "for windows to 1 min); per panel")
    p.add_argument("--cells", choices=("on", "off"), nargs="?", const="on", default=None,
                   metavar="on|off", help="profile every cell from now on (off: stop)")
    p.add_argument("--cells-min", type=seconds(lambda v: check_seconds(v, "--cells-min", 0, 86400)),
                   default=None, metavar="S", dest="cells_min_s",
                   help="with --cells: show a summary only for cells that ran at least S seconds")
    return p


def cell_parser() -> argparse.ArgumentParser:
    """The parser of the ``%%gpumon`` line (cell magic)."""
    p = _Parser(prog="%%gpumon",
                description="Profile the cell below: timeline and summary of its GPU use.")
    _add_sampler_options(p)
    p.set_defaults(action="start")
    return p


def _parse(parser: argparse.ArgumentParser, line: str) -> argparse.Namespace:
    try:
        words = shlex.split(line)
    except ValueError as exc:
        raise UsageError(f"{parser.prog}: cannot read the options ({exc}); see {parser.prog}?") from None
    return parser.parse_args(words)


def parse_line(line: str) -> Options:
    """Options of a ``%gpumon`` line; UsageError for anything wrong, HelpRequestedError for ``-h``."""
    ns = _parse(line_parser(), line)
    if ns.action in ("stop", "status") and (flags := vars(ns).pop("_given", None)):
        given = ", ".join(sorted(flags.values()))
        raise UsageError(f"%gpumon {ns.action}: takes no options, got {given}; "
                         f"give them to %gpumon (start) instead")
    if ns.cells_min_s is not None and ns.cells is None:
        ns.cells = "on"
    return ns


def parse_cell_line(line: str) -> Options:
    """Options of a ``%%gpumon`` line; UsageError for anything wrong, HelpRequestedError for ``-h``."""
    return _parse(cell_parser(), line)


def parse_free(line: str) -> argparse.Namespace:
    """Options of ``%gpumon free NAME... [--outputs] [--traceback] [--all-hidden]``; UsageError when
    nothing or something wrong is asked."""
    p = _Parser(prog="%gpumon free",
                description="Delete the named variables (and, if asked, the output cache and the "
                            "last traceback), then release PyTorch's cached memory.")
    p.add_argument("names", nargs="*", metavar="NAME", help="variables of the notebook to delete")
    p.add_argument("--outputs", action="store_true", help="clear the output cache (Out, _, __, ___)")
    p.add_argument("--traceback", action="store_true",
                   help="drop the last error (sys.last_traceback, sys.last_value)")
    p.add_argument("--all-hidden", action="store_true", help="both --outputs and --traceback")
    ns = _parse(p, line)
    if ns.all_hidden:
        ns.outputs = ns.traceback = True
    if not (ns.names or ns.outputs or ns.traceback):
        raise UsageError("%gpumon free: name what to free: NAME..., --outputs, --traceback or --all-hidden")
    return ns
