"""Random ``%gpumon`` lines: each gives parsed options, the help, or exactly one UsageError line.

Never another exception, and parsing never starts a thread. The outcomes of a fixed draw
of lines are printed (``-s`` shows them) so they can be quoted.
"""

from __future__ import annotations

import threading
from collections import Counter

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

def _check(parse, line: str) -> str:
    """Parse ``line``; "ok", "usage" (one UsageError line) or "help"; anything else fails."""
    before = threading.active_count()
    try:
        opts = parse(line)
    except UsageError as exc:
        text = str(exc)
        assert text and "\n" not in text and text.startswith(("%gpumon", "%%gpumon")), text
        outcome = "usage"
    except options.HelpRequestedError as shown:
        assert "usage:" in str(shown)
        outcome = "help"
    else:
        assert isinstance(opts, options.Options) and opts.action in options.ACTIONS
        if opts.interval is not None:
            assert 0.01 <= opts.interval <= 3600
        outcome = "ok"
    assert threading.active_count() == before
    return outcome


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LINES)
def test_random_line_magic_input(line: str) -> None:
    _check(options.parse_line, line)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(LINES)
def test_random_cell_magic_input(line: str) -> None:
    _check(options.parse_cell_line, line)


def test_the_fuzzed_lines_reach_every_outcome() -> None:
    # The lines above must exercise the parser, not only its refusals: a fixed draw of them
    # parses some, refuses some in one line and shows the help for some, and nothing else.
    seen: Counter[str] = Counter()

    @settings(max_examples=400, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(LINES)
    def draw(line: str) -> None:
        seen[_check(options.parse_line, line)] += 1

    draw()
    print(f"\nmagic parser fuzz: {sum(seen.values())} %gpumon lines: {dict(seen)}")
    assert set(seen) == {"ok", "usage", "help"} and sum(seen.values()) >= 200
