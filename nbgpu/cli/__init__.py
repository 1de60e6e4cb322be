"""The ``nbgpu`` command, a small module per sub-command: bad arguments are one line and exit
code 2; failures one line saying what failed and what to do (exit code 1)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
import threading
from collections.abc import Sequence

from ..errors import BadArgumentError, NbgpuError
from .shared_options import OnceParser, add_shared, sigterm_as_ctrl_c


def _port(value: str) -> int:
    if not value.isdigit() or not 0 <= int(value) <= 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number (0-65535)")
    return int(value)


FAIL_IF_GRAMMAR = """\
--fail-if grammar (spaces allowed between the parts):
  BOUND  := METRIC OP LIMIT
  OP     := > | >= | < | <=
  LIMIT  := SIGN NUMBER %      NEW against BASE x (1 + N/100)
          | SIGN NUMBER UNIT   NEW minus BASE
          | NUMBER UNIT        NEW itself
  SIGN   := + | -
A bound says when the gate fails. A figure missing from either run breaks its bound.

METRIC and its units (totals over all GPUs):
  duration_s                      ms, s, min, h
  energy_j                        J, kJ, MJ, Wh, kWh
  mem_peak_bytes, mem_delta_bytes B, KiB, MiB, GiB, TiB, kB, MB, GB, TB
  util_mean_pct, util_max_pct     pp (percentage points)
  power_mean_w, power_max_w       W, kW
  temp_max_c                      C

examples:
  nbgpu compare base.jsonl new.jsonl --fail-if "energy_j>+5%"
  nbgpu compare base.jsonl new.jsonl --fail-if "mem_peak_bytes>+1GiB" --fail-if "duration_s>300s"
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``nbgpu`` and its sub-commands."""
    from ..version import __version__

    p = OnceParser(prog="nbgpu", description="Watch NVIDIA GPUs: record a command's GPU timeline, "
                   "turn it into an HTML report, export readings to Prometheus, or open the demo notebook.",
                   epilog="Run `nbgpu COMMAND --help` for the options of a command.")
    p.add_argument("--version", action="version", version=f"nbgpu {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=OnceParser)

    r = sub.add_parser("record", help="run a command and record the GPU timeline while it runs",
                       description="Run CMD, sample the GPUs while it runs and write the timeline to a "
                       "file as it grows (flushed every second). Exits with CMD's exit code. On a "
                       "terminal it shows a live status line per GPU; otherwise only a final summary.",
                       epilog="example: nbgpu record -o run.jsonl -- python train.py --epochs 3")
    add_shared(r, "source", "auto", "auto")
    add_shared(r, "interval", 0.5, "0.5")
    r.add_argument("-o", "--output", default="nbgpu-run.jsonl", metavar="FILE",
                   help="output file, .jsonl, .csv or .parquet (default: nbgpu-run.jsonl)")
    r.add_argument("-q", "--quiet", action="store_true", help="no live status and no summary")
    r.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS",
                   help="the command to run, after --")

    rep = sub.add_parser("report", help="turn a recorded run into one self-contained HTML file",
                         description="Read a run written by `nbgpu record` (.jsonl, .csv or .parquet) "
                         "and write one HTML file with the plots, a per-GPU summary, alerts and marks. "
                         "It needs no network and no JavaScript.",
                         epilog="example: nbgpu report run.jsonl -o report.html")
    rep.add_argument("run", metavar="RUN", help="the recorded file")
    rep.add_argument("-o", "--output", default=None, metavar="FILE",
                     help="the HTML file to write (default: RUN with .html)")
    rep.add_argument("--title", default=None, help="title of the report")
    rep.add_argument("--diagnose", action="store_true",
                     help="instead of HTML, replay RUN through the diagnostics rules and print the findings")
    rep.add_argument("--threshold", action="append", default=None, metavar="NAME=NUMBER",
                     help="with --diagnose: change one threshold (repeatable), e.g. input_util_below_pct=40")
    rep.add_argument("--json", action="store_true", help="with --diagnose: print the findings as JSON")

    c = sub.add_parser("compare", help="compare two recorded runs; with --fail-if, a CI regression gate",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Read two runs written by `nbgpu record` and print a side-by-side table\n"
                       "per GPU and over all GPUs: both figures, the change and whether it is beyond\n"
                       "the runs' own noise. Exit code 1 if a --fail-if bound is broken, 2 for a bad\n"
                       "bound.", epilog=FAIL_IF_GRAMMAR)
    c.add_argument("base", metavar="BASE", help="the reference run")
    c.add_argument("new", metavar="NEW", help="the run to check against it")
    c.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="also write an HTML report with both timelines on one elapsed-time axis")
    c.add_argument("--fail-if", action="append", default=[], metavar="BOUND", dest="fail_if",
                   help='fail (exit 1) when BOUND holds, e.g. "energy_j>+5%%", "mem_peak_bytes>+1GiB", '
                   '"duration_s>300s"; repeat for more bounds')

    d = sub.add_parser("demo", help="open the quickstart notebook in JupyterLab",
                       description="Start JupyterLab on notebooks/quickstart.ipynb, bound to 127.0.0.1, "
                       "and print its URL. Without a GPU the notebook uses simulated GPUs.")
    d.add_argument("--no-browser", action="store_false", dest="browser",
                   help="print the URL but do not open a browser")
    d.add_argument("--port", type=_port, default=0, help="port for JupyterLab (default: a free one)")

    e = sub.add_parser("export", help="serve current GPU readings to Prometheus",
                       description="Serve the GPUs' current readings at http://HOST:PORT/metrics in the "
                       "Prometheus text format, with dcgm-exporter's metric names where it has them. "
                       "GPU metrics only. Runs until Ctrl-C.",
                       epilog="example: nbgpu export --port 9464   (then scrape 127.0.0.1:9464)")
    add_shared(e, "source", "auto", "auto")
    add_shared(e, "interval", 1.0, "1")
    e.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: 127.0.0.1; 0.0.0.0 exposes it to the network)")
    e.add_argument("--port", type=_port, default=None,
                   help="port to listen on (default: NbGpu.exporter_port, $NBGPU_EXPORTER_PORT, else 9464)")
    e.add_argument("--hostname", default=None, help="the Hostname label (default: this machine's name)")
    pm = sub.add_parser("postmortem", help="say why the last kernel died (its flight record)",
                        description="Read the flight records of kernels that died without closing them.")
    pm.add_argument("--all", action="store_true", help="every dead kernel, not only the newest")
    pm.add_argument("--json", action="store_true", help="print JSON")
    pm.add_argument("--clear", action="store_true", help="remove the records already shown")
    return p


# Each sub-command: the module and function that run it, and the arguments they take, in order.
COMMANDS = {
    "record": (".record", "run_record", ("cmd", "source", "interval", "output", "quiet")),
    "report": (".report", "run_report", ("run", "output", "title")),
    "diagnose": (".diagnose", "run_diagnose", ("run", "threshold", "json")),
    "compare": (".compare", "run_compare", ("base", "new", "output", "fail_if")),
    "postmortem": ("..postmortem", "run_cli", ("all", "json", "clear")),
    "demo": (".demo", "run_demo", ("port", "browser")),
    "export": (__name__, "run_export", ("source", "interval", "host", "port", "hostname")),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``nbgpu`` console script; returns the exit code."""
    for stream in (sys.stdout, sys.stderr):  # a file name that is not UTF-8 prints, escaped
        with contextlib.suppress(AttributeError, ValueError):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    name = args.command
    if name == "record":
        args.cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
        if not args.cmd:
            parser.exit(2, "nbgpu record: error: no command to run; put it after -- "
                        "(see `nbgpu record --help`)\n")
    elif name == "report" and (args.diagnose or args.threshold or args.json):
        if not args.diagnose:
            parser.exit(2, "nbgpu report: error: --threshold and --json need --diagnose\n")
        name = "diagnose"
    module, function, names = COMMANDS[name]
    run = getattr(importlib.import_module(module, __name__), function)
    try:
        return run(*(getattr(args, n) for n in names))
    except BadArgumentError as exc:
        print(f"nbgpu {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except NbgpuError as exc:
        print(f"nbgpu {args.command}: {exc}", file=sys.stderr)
        return 1


def run_export(source: str, interval: float, host: str, port: int | None,
               hostname: str | None = None) -> int:
    """``nbgpu export``: serve ``source`` at http://host:port/metrics until Ctrl-C or SIGTERM
    (``port`` None: ``NbGpu.exporter_port``)."""
    from ..config import settings
    from ..exporter import serve
    from ..sampler import Sampler

    port = settings().exporter_port if port is None else port
    with (Sampler(source, interval=interval, host=False) as sampler,
          serve(sampler, host, port, hostname) as exporter, contextlib.suppress(KeyboardInterrupt)):
        label = " (SIMULATED)" if sampler.simulated else ""
        print(f"nbgpu export: serving {len(sampler.devices)} GPU(s){label} at {exporter.url}",
              file=sys.stderr, flush=True)
        if host not in ("127.0.0.1", "localhost", "::1"):
            print(f"nbgpu export: listening on {host}: other machines can read these metrics",
                  file=sys.stderr, flush=True)
        with sigterm_as_ctrl_c():
            threading.Event().wait()  # until Ctrl-C or SIGTERM
    return 0
