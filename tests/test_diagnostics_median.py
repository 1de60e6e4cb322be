"""The rules' median is numpy's, NaN included."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from nbgpu.diagnostics.window import median

values = st.lists(st.floats(allow_infinity=False, width=64) | st.just(math.nan), min_size=1,
                  max_size=60)


@given(values)
def test_median_is_numpys(xs):
    a = np.array(xs)
    want = float(np.median(a))
    got = median(a)
    assert (math.isnan(want) and math.isnan(got)) or got == want
