"""``nbgpu compare --help`` carries the --fail-if grammar itself (issue 33)."""

from __future__ import annotations

import re

import pytest

from nbgpu.cli import main
from nbgpu.profiles.comparison import METRIC_UNITS, parse_bound


@pytest.fixture
def help_text(capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(["compare", "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_no_doubled_percent_and_no_pointer_to_docs_a_pip_user_lacks(help_text):
    assert "%%" not in help_text
    assert "docs/" not in help_text


def test_the_grammar_is_in_the_help(help_text):
    assert "BOUND  := METRIC OP LIMIT" in help_text
    for metric in METRIC_UNITS:
        assert metric in help_text
    for unit in ("GiB", "ms", "kWh", "W", "pp", "C"):
        assert re.search(rf"\b{unit}\b", help_text), unit


def test_every_example_of_the_help_is_a_valid_bound(help_text):
    examples = re.findall(r'"([a-z_]+[<>]=?[^"]+)"', help_text)
    assert len(examples) >= 3
    for text in examples:
        parse_bound(text)


def test_each_metric_lists_the_units_it_takes(help_text):
    table = help_text.split("METRIC and its units", 1)[1].split("examples:", 1)[0]
    lines = {m: line for line in table.splitlines() for m in METRIC_UNITS if re.search(rf"\b{m}\b", line)}
    for metric, units in METRIC_UNITS.items():
        listed = set(lines[metric].split("  ")[-1].strip().replace(",", " ").split())
        assert {u for u in units if u != "°C"} <= listed, (metric, lines[metric])
