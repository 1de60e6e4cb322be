"""A fresh exporter on simulated GPUs: nothing before the first reading; dcgm types after (issue 33, 6)."""

from __future__ import annotations

import time

import pytest

from nbgpu.exporter import WHOLE, prometheus_text
from nbgpu.sampler import Sampler


def _samples(text: str) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            out.setdefault(name, []).append(float(line.rsplit(" ", 1)[1]))
    return out


@pytest.fixture
def fresh():
    s = Sampler(source="sim", interval=0.2)
    yield s
    s.stop()


def test_nothing_is_exported_before_the_first_reading(fresh):
    before = _samples(prometheus_text(fresh, hostname="h"))
    gpu = {n for n in before if n.startswith(("DCGM_", "nbgpu_gpu_"))}
    assert gpu == set(), before


def test_after_the_first_reading_dcgm_fields_have_dcgm_types(fresh):
    fresh.start()
    deadline = time.monotonic() + 10
    while True:
        after = _samples(prometheus_text(fresh, hostname="h"))
        if "DCGM_FI_DEV_FB_USED" in after or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert "nbgpu_gpu_info" in after and "DCGM_FI_DEV_GPU_UTIL" in after
    latest = {row["gpu"]: row for row in fresh.latest()}
    for name in WHOLE & after.keys():
        assert all(v == int(v) for v in after[name]), (name, after[name])
    mib = [v for v in after["DCGM_FI_DEV_FB_USED"]]
    assert all(v == int(v) for v in mib)
    assert min(abs(v - row["mem_used_bytes"] / 2**20) for v in mib for row in latest.values()) < 2**10
