"""Products whose rows are reduced are laid out by columns (``folded_matmul(...,
columns=True)``): the values are the product's, every schedule gives the same bits in
checked mode, and the rows reduce to NumPy's results in both modes (fast mode's float32
products depend on how BLAS is called, which the schedule changes)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.interp.tile.fastpaths.fusion import row_reduced
from tessera.interp.tile.mma import folded_matmul


def _scores(q: ts.Tensor["B", "S", "D", ts.f32], k: ts.Tensor["B", "S", "D", ts.f32],
            top: ts.Tensor["B", "S", ts.f32], total: ts.Tensor["B", "S", ts.f32]):
    """Row max and row sum of the scaled scores of one query tile against every key."""
    s = ts.tile.mma(q[tile_m:tile_m + BM], k[0:S].T) * 0.5  # tile_m, BM, S: tile names
    top[tile_m:tile_m + BM] = ts.tile.row_max(s)
    total[tile_m:tile_m + BM] = ts.tile.row_sum(s)


@pytest.mark.parametrize("shape", [((3, 5), (5, 4)), ((2, 7, 3), (3, 6)), ((6, 2), (4, 2, 5)),
                                   ((4, 1, 3, 2), (1, 5, 2, 6))])
def test_the_column_layout_holds_the_same_product(shape) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(len(shape[0]))
    a, b = (rng.standard_normal(s) for s in shape)
    by_rows, by_columns = folded_matmul(a, b), folded_matmul(a, b, columns=True)
    assert by_rows.shape == by_columns.shape
    np.testing.assert_allclose(by_columns, by_rows, rtol=1e-13, atol=1e-13)
    assert by_columns.strides[-2] < by_columns.strides[-1]  # columns are contiguous


@settings(max_examples=12, deadline=None)
@given(batch=st.integers(1, 3), tiles=st.integers(1, 4), bm=st.sampled_from([8, 16, 64]),
       d=st.sampled_from([4, 16]), mode=st.sampled_from(["checked", "fast"]))
def test_row_reduced_products_agree_across_schedules(batch: int, tiles: int, bm: int,
                                                    d: int, mode: str) -> None:
    rng = np.random.default_rng(batch * 100 + tiles * 10 + bm)
    s = tiles * bm
    q = rng.standard_normal((batch, s, d)).astype(np.float32)
    k = rng.standard_normal((batch, s, d)).astype(np.float32)
    kernel = ts.kernel(_scores)
    outs = []
    for schedule in ("vectorized", "sequential"):
        top, total = np.zeros((batch, s), np.float32), np.zeros((batch, s), np.float32)
        kernel(q, k, top, total, tile_shape=(bm, s), mode=mode, schedule=schedule)
        outs.append((top.tobytes(), total.tobytes()))
        ref = (q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)) * 0.5
        np.testing.assert_allclose(top, ref.max(-1), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(total, ref.sum(-1), rtol=1e-4, atol=1e-3)
    if mode == "checked":
        assert outs[0] == outs[1]
    fn = kernel.last.functions[kernel.name]
    mma = next(i for i in fn.body.instrs if i.op.name == "tile.mma")
    scale = next(i for i in fn.body.instrs if mma.results[0] in i.operands)
    assert scale.op.name == "tile.mul" and row_reduced(scale)
