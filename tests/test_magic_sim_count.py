"""``--source sim:N``: N simulated GPUs for the magics and the command (issue 33)."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError

from nbgpu import Sampler
from nbgpu.cli.shared_options import check_source
from nbgpu.errors import BadArgumentError
from nbgpu.magics.options import parse_cell_line, parse_line


def test_sim_8_gives_a_sampler_of_eight_gpus():
    opts = parse_line("--source sim:8 --gpus 7")
    assert opts.source == "sim:8" and opts.gpus == "7"
    s = Sampler(source=opts.source, interval=0.1, host=False)
    try:
        assert len([d for d in s.devices if d.parent is None]) == 8
        assert s.simulated
    finally:
        s.stop()


def test_cell_magic_takes_sim_n_too():
    assert parse_cell_line("--source sim:3").source == "sim:3"


@pytest.mark.parametrize("spec", ["sim:0", "sim:abc", "sim:", "sim:65", "sim:-1"])
def test_a_bad_count_is_one_clear_error(spec):
    with pytest.raises(UsageError, match=r"sim:N takes a whole number of GPUs from 1 to 64"):
        parse_line(f"--source {spec}")
    with pytest.raises(BadArgumentError, match=r"sim:N takes a whole number of GPUs from 1 to 64"):
        check_source(spec)
    with pytest.raises(BadArgumentError, match=r"sim:N takes a whole number"):
        Sampler(source=spec, host=False)
