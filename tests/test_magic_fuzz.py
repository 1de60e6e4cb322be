"""Random ``%gpumon`` lines: each gives parsed options, the help, or exactly one UsageError line.

Never another exception, and parsing never starts a thread. The number of lines tried is
printed (``-s`` shows it) so it can be quoted.
"""

from __future__ import annotations

import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from nbgpu.magics import options

FLAGS = ["--source", "--interval", "--gpus", "--window", "--metrics", "--refresh", "--cells",
         "--cells-min", "-h", "--help", "--int", "--sou", "--bogus", "-x", "--"]
VALUES = ["sim", "auto", "nvml", "prometheus=http://127.0.0.1:9090", "prometheus=", "0", "0.5", "1e-9",
          "-1", "nan", "inf", "1e400", "0,1", "0,,1", "util,mem", "bogus", "on", "off", "'", '"',
          "start", "stop", "status", "é", "\\", "=", "", " "]
TOKENS = st.one_of(st.sampled_from(FLAGS), st.sampled_from(VALUES),
                   st.builds(lambda f, v: f"{f}={v}", st.sampled_from(FLAGS), st.sampled_from(VALUES)),
                   st.text(max_size=8))
GOOD = {"--source": ["sim", "auto", "nvml", "prometheus=http://h:9090"],
        "--interval": ["0.01", "0.5", "3600"],
        "--gpus": ["0", "0,1"], "--window": ["5", "60"], "--metrics": ["util", "util,mem,power"],
        "--refresh": ["0.25", "1"], "--cells": ["on", "off"], "--cells-min": ["0", "2"]}
PAIRS = st.lists(st.sampled_from(sorted(GOOD)).flatmap(
    lambda f: st.sampled_from(GOOD[f]).map(lambda v: f"{f} {v}")), max_size=4).map(" ".join)
LINES = st.one_of(st.lists(TOKENS, max_size=8).map(" ".join), st.text(max_size=40), PAIRS)

tried = {"line": 0, "cell": 0, "usage": 0, "help": 0, "ok": 0}


def _check(parse, line: str, kind: str) -> None:
    before = threading.active_count()
    tried[kind] += 1
    try:
        opts = parse(line)
    except UsageError as exc:
        tried["usage"] += 1
        text = str(exc)
        assert text and "\n" not in text and text.startswith(("%gpumon", "%%gpumon")), text
    except options.HelpRequestedError as shown:
        tried["help"] += 1
        assert "usage:" in str(shown)
    else:
        tried["ok"] += 1
        assert isinstance(opts, options.Options) and opts.action in options.ACTIONS
        if opts.interval is not None:
            assert 0.01 <= opts.interval <= 3600
    assert threading.active_count() == before


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LINES)
def test_random_line_magic_input(line: str) -> None:
    _check(options.parse_line, line, "line")


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LINES)
def test_random_cell_magic_input(line: str) -> None:
    _check(options.parse_cell_line, line, "cell")


def test_report_how_many_were_tried() -> None:
    total = tried["line"] + tried["cell"]
    print(f"\nmagic parser fuzz: {total} lines ({tried['line']} %gpumon, {tried['cell']} %%gpumon): "
          f"{tried['ok']} parsed, {tried['usage']} one-line UsageError, {tried['help']} help, 0 other")
    assert total == 0 or tried["ok"] + tried["usage"] + tried["help"] == total
