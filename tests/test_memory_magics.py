"""%gpumon memory and %gpumon free in an in-process IPython shell."""

from __future__ import annotations

import sys

import pytest
from IPython.core.error import UsageError

from conftest_panel import loaded_shell

torch = pytest.importorskip("torch")


@pytest.fixture
def shell():
    yield from loaded_shell()


def test_memory_prints_the_names_with_readable_sizes(shell, capsys) -> None:
    shell.user_ns["weights"] = torch.zeros(1 << 18)  # 1 MiB
    shell.run_line_magic("gpumon", "memory")
    out = capsys.readouterr().out
    if torch.cuda.is_available():  # the table is of CUDA tensors there
        assert "not reachable from a name" in out
    else:
        assert "weights" in out and "1.0 MiB" in out


def test_free_deletes_only_the_names_asked_for(shell, capsys) -> None:
    shell.user_ns.update(a=torch.zeros(10), b=torch.zeros(10))
    shell.run_line_magic("gpumon", "free a")
    assert "a" not in shell.user_ns and "b" in shell.user_ns
    assert "freed a" in capsys.readouterr().out


def test_an_unknown_name_is_one_line_and_deletes_nothing(shell) -> None:
    shell.user_ns.update(a=torch.zeros(10))
    with pytest.raises(UsageError) as err:
        shell.run_line_magic("gpumon", "free a nosuch")
    assert "\n" not in str(err.value) and "nosuch" in str(err.value)
    assert "a" in shell.user_ns


@pytest.mark.parametrize("line", ["free", "free --bogus", "memory now"])
def test_bad_lines_are_one_usage_error(shell, line: str) -> None:
    with pytest.raises(UsageError) as err:
        shell.run_line_magic("gpumon", line)
    assert "\n" not in str(err.value) and str(err.value).startswith("%gpumon")


def test_traceback_drops_the_last_error(shell, monkeypatch) -> None:
    for attr in ("last_traceback", "last_value", "last_type"):
        monkeypatch.setattr(sys, attr, object(), raising=False)
    shell.run_line_magic("gpumon", "free --traceback")
    assert sys.last_traceback is None and sys.last_value is None and sys.last_type is None


def test_free_prints_nvmls_used_memory_before_and_after_from_a_fresh_reading(shell, capsys) -> None:
    import re

    from nbgpu import session

    session.ensure_sampler("sim:2", 0.1)
    shell.user_ns.update(a=torch.zeros(10))
    shell.run_line_magic("gpumon", "free a")
    out = capsys.readouterr().out
    for gpu in (0, 1):
        assert re.search(rf"^nbgpu: NVML used, GPU {gpu}: [\d.]+ [KMG]iB -> [\d.]+ [KMG]iB$", out, re.M), out
