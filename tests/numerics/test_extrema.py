"""IEEE 754-2019 ``maximum``/``minimum`` (sec. 9.6) in the interpreters: ``+0`` ranks
above ``-0`` whatever the operands' order (NumPy's ``maximum`` returns the second of two
equal zeros), as PTX's ``max.f32``/``min.f32`` do on a GPU."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.numerics import extrema

VALUES = [0.0, -0.0, 1.5, -2.0, math.inf, -math.inf]


def _reference(a: float, b: float, is_max: bool) -> float:
    if a == b == 0:  # the zeros: +0 above -0
        negative = (math.copysign(1, a) < 0 and math.copysign(1, b) < 0) if is_max else \
            (math.copysign(1, a) < 0 or math.copysign(1, b) < 0)
        return -0.0 if negative else 0.0
    return max(a, b) if is_max else min(a, b)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16])
def test_every_pair_in_either_order(dt: type) -> None:
    pairs = list(itertools.product(VALUES, repeat=2))
    a = np.array([p[0] for p in pairs], dt)
    b = np.array([p[1] for p in pairs], dt)
    for fn, is_max in ((extrema.maximum, True), (extrema.minimum, False)):
        got = fn(a, b)
        want = np.array([_reference(x, y, is_max) for x, y in pairs], dt)
        assert got.dtype == np.dtype(dt)
        assert got.tobytes() == want.tobytes()


@ts.kernel
def both_orders(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32],
                out: ts.Tensor[4, "N", ts.f32]):
    i = ts.tile.linear_id()
    out[0, i] = ts.tile.maximum(x[i], y[i])
    out[1, i] = ts.tile.maximum(y[i], x[i])
    out[2, i] = ts.tile.minimum(x[i], y[i])
    out[3, i] = ts.tile.minimum(y[i], x[i])


def test_tile_and_graph_interpreters_rank_zeros_alike() -> None:
    x, y = np.array([-0.0, 0.0, -0.0], np.float32), np.array([0.0, -0.0, -0.0], np.float32)
    out = np.ones((4, 3), np.float32)
    both_orders(x, y, out, grid=3)
    assert np.signbit(out).tolist() == [[False, False, True], [False, False, True],
                                        [True, True, True], [True, True, True]]
    for fn, negative in ((ts.maximum, [False, False, True]), (ts.minimum, [True] * 3)):
        for a, b in ((x, y), (y, x)):
            assert np.signbit(np.asarray(ts.jit(fn)(a, b))).tolist() == negative
    ts.check_against_reference(both_orders, x, y, np.ones((4, 3), np.float32),
                               backend="target", grid=3)
