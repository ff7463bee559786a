"""Carried exact sums in PTX (tessera.lower.exact.carried): graph sums, means and mean
squared errors over rows too long for one program are walked in blocks that carry one
long accumulator per result element in shared memory; under the Target IR interpreter
they give the graph interpreter's bits on sm_80 and sm_90a (whatever the blocks, the
ragged last one, non-finite values inside one block or spread over several, column
means, and norms whose later passes read the earlier passes' means), and ptxas
assembles them with no advisory and no spill."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import op
from tessera.ir.core import walk
from tessera.ir.dialects.tile import compute as tile_compute
from tests.frontend.graph.lowered.same import TARGETS, assembles_clean, same_on_target


def _total(x):  # type: ignore[no-untyped-def]
    return op.sum(x)


def _row_sums(x):  # type: ignore[no-untyped-def]
    return op.sum(x, axis=-1)


def _mean_squares(x):  # type: ignore[no-untyped-def]
    return op.mean(x * x, axis=-1)


def _mse(a, b):  # type: ignore[no-untyped-def]
    return op.mse(a, b)


def _layernorm(x, g):  # type: ignore[no-untyped-def]
    mu = op.mean(x, axis=-1, keepdims=True)
    d = x - mu
    return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g


def _centred(x):  # type: ignore[no-untyped-def]
    """A result along the rows and a sum of it: two passes over the blocks."""
    d = x - op.mean(x, axis=-1, keepdims=True)
    return d, op.sum(op.abs(d))


def _column_means(x):  # type: ignore[no-untyped-def]
    return op.mean(x, axis=0)


def _spread(rng: np.random.Generator, shape: tuple[int, ...], fmt: Any = np.float32
            ) -> np.ndarray:
    """Values across many binades, with exact cancellations: a sum rounded along the
    way (in any order) would lose bits the exact sum keeps."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape))
    flat = x.reshape(-1)
    flat[1::7] = -flat[0:-1:7][: len(flat[1::7])]  # pairs that cancel exactly
    return x.astype(fmt)


def _carried(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """The program of ``fn``, after checking that it walks its rows in blocks (a
    ``tile.reduce`` that continues an accumulator)."""
    lowered = ts.jit(fn).lower(*args)
    assert any(isinstance(i.op, tile_compute.Reduce) and len(i.operands) == 2
               for k in lowered.kernels for i in walk(k.function.body))
    return lowered


CASES = {
    "sum_f32": (_total, lambda rng: (_spread(rng, (250, 251)),)),
    "sum_bf16": (_total, lambda rng: (_spread(rng, (250, 251), ml_dtypes.bfloat16),)),
    "mean_squares": (_mean_squares, lambda rng: (_spread(rng, (3, 9000)),)),
    "mse_64x80": (_mse, lambda rng: (_spread(rng, (64, 80)), _spread(rng, (64, 80)))),
    "mse_250x251": (_mse, lambda rng: (_spread(rng, (250, 251)), _spread(rng, (250, 251)))),
    "mse_16x512": (_mse, lambda rng: (_spread(rng, (16, 512)), _spread(rng, (16, 512)))),
    "sum_256x256": (_total, lambda rng: (_spread(rng, (256, 256)),)),
    "row_sums_ragged": (_row_sums, lambda rng: (_spread(rng, (7, 5000)),)),
    "sum_3d": (_total, lambda rng: (_spread(rng, (9, 9, 90)),)),
    "column_means": (_column_means, lambda rng: (_spread(rng, (9000, 3)),)),
    "layernorm_passes": (_layernorm, lambda rng: (rng.standard_normal((2, 20000)).astype(
        np.float32), rng.standard_normal(20000).astype(np.float32))),
    "centred_passes": (_centred, lambda rng: (_spread(rng, (2, 20000)),)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_carried_sums_give_the_graph_bits(case: str) -> None:
    fn, make = CASES[case]
    args = make(np.random.default_rng(len(case)))
    _carried(fn, args)
    same_on_target(fn, args)


# (row, column) pairs of a 250 x 251 operand; its blocks are 16 rows
ONE_BLOCK = [(0, 3), (5, 200)]
TWO_BLOCKS = [(0, 3), (200, 17)]


@pytest.mark.parametrize("where", [ONE_BLOCK, TWO_BLOCKS], ids=["one_block", "two_blocks"])
@pytest.mark.parametrize("values", [(math.inf, -math.inf), (math.inf, math.inf),
                                    (math.nan, 1.0), (-math.inf, 3.0e38)],
                         ids=["inf_minus_inf", "inf_inf", "nan", "minus_inf"])
def test_non_finite_terms_in_one_block_or_several(where: list[tuple[int, int]],
                                                  values: tuple[float, float]) -> None:
    x = _spread(np.random.default_rng(3), (250, 251))
    for (i, j), v in zip(where, values):
        x[i, j] = v
    _carried(_total, (x,))
    same_on_target(_total, (x,))
    rows = _spread(np.random.default_rng(4), (2, 9000))
    rows[0, 10], rows[0, 8500], rows[1, 4095] = values[0], values[1], values[0]
    same_on_target(_row_sums, (rows,))


def test_the_mean_squared_error_counts_every_element() -> None:
    """A mean over two blocks of which the second is ragged: the count is the whole
    operand's (16 terms per element), so one large square in the last block is divided
    by all of them."""
    a = np.zeros((250, 251), np.float32)
    b = np.zeros((250, 251), np.float32)
    a[249, 250] = 3.0
    lowered = _carried(_mse, (a, b))
    want = np.float32(9.0 / (250 * 251))
    assert np.asarray(lowered.run(a, b).array).tobytes() == want.tobytes()
    same_on_target(_mse, (a, b))


@pytest.mark.parametrize("target", TARGETS)
def test_carried_sums_assemble_clean(target: str) -> None:
    rng = np.random.default_rng(5)
    for case in ("sum_f32", "sum_bf16", "mean_squares", "mse_64x80", "row_sums_ragged"):
        fn, make = CASES[case]
        (kernel,) = ts.jit(fn).lower(*make(rng)).target(target).kernels
        assert "red.shared.add.u64" in kernel.ptx
        assembles_clean(kernel)


@pytest.mark.parametrize("target", TARGETS)
def test_a_long_mse_is_one_small_loop(target: str) -> None:
    """65,536 elements (over a million terms) walked in blocks: the PTX is one block's
    code in a loop, not a whole-held table of terms (megabytes of PTX)."""
    a, b = (_spread(np.random.default_rng(k), (256, 256)) for k in (6, 7))
    (kernel,) = ts.jit(_mse).lower(a, b).target(target).kernels
    assert len(kernel.ptx) < 200_000
    assembles_clean(kernel)
