"""``matmul(..., tile_shape=)`` is a schedule hint of 2 or 3 positive ints: kept in the
Graph IR when well formed, an ArgumentError at the user's line otherwise, and never a
change to the product (checked against NumPy float64, exact for these small ints)."""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op

HERE = os.path.basename(__file__)
A = np.arange(6, dtype=np.float32).reshape(2, 3)
B = np.arange(12, dtype=np.float32).reshape(3, 4)
WANT = A.astype(np.float64) @ B

GOOD = st.lists(st.integers(1, 1024), min_size=2, max_size=3).flatmap(
    lambda xs: st.sampled_from([tuple(xs), list(xs), tuple(np.int64(x) for x in xs)]))
BAD = st.one_of(
    st.lists(st.integers(1, 64), min_size=0, max_size=1).map(tuple),      # too short
    st.lists(st.integers(1, 64), min_size=4, max_size=6).map(tuple),      # too long
    st.lists(st.integers(-64, 0), min_size=2, max_size=3).map(tuple),     # not positive
    st.tuples(st.floats(0.5, 64).filter(lambda v: v != int(v)), st.just(2), st.just(3)),
    st.sampled_from(["128", 128, (True, 2), (2, None), {"BM": 64}, (64.0, 64.0), b"ab"]),
)


@settings(max_examples=40, deadline=None)
@given(tile=GOOD)
def test_good_tile_shapes_are_kept_and_do_not_change_the_product(tile: Any) -> None:
    assert np.array_equal(np.asarray(op.matmul(A, B, tile_shape=tile)), WANT)
    f = ts.jit(lambda a, b: ts.matmul(a, b, tile_shape=tile))
    assert np.array_equal(np.asarray(f(A, B)), WANT)
    assert f"tile_shape = [{', '.join(str(int(t)) for t in tile)}]" in ts.inspect_ir(f)


@settings(max_examples=60, deadline=None)
@given(tile=BAD)
def test_malformed_tile_shapes_are_argument_errors_at_the_users_line(tile: Any) -> None:
    first = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    calls = (lambda: op.matmul(A, B, tile_shape=tile),
             lambda: ts.jit(lambda a, b: op.matmul(a, b, tile_shape=tile))(A, B))
    for line, call in enumerate(calls, first):  # each call's own line
        with pytest.raises(ts.ArgumentError) as info:
            call()
        text = str(info.value)
        assert f"{HERE}:{line}" in text, text
        assert "is not a tile shape" in text and "2 or 3 positive ints" in text
