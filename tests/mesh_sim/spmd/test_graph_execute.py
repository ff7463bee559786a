"""Placed graph programs run on the simulated mesh: results are DistTensors whose global
value has the bits of the same program on one device (exact mode)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import dist

RNG = np.random.default_rng(31)
M3 = dist.mesh(axes=("dp", "tp", "pp"), shape=(2, 3, 2))


def arr(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def on(a: np.ndarray, mesh: Any, *pairs: tuple[Any, Any]) -> ts.DistTensor:
    spec = dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    return dist.from_numpy(a, mesh=mesh, layout=spec)


def same_bits(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def program(x: Any, w: Any, b: Any) -> Any:
    h = ts.tanh(ts.matmul(x, w) + b)
    s = ts.softmax(h, axis=-1)
    m = ts.mean(h * h, axis=0, keepdims=True)
    r = ts.reshape(ts.transpose(s), (w.shape[1], x.shape[0]))
    return ts.sum(s * m), r[1:, :], ts.max(h, axis=1), ts.mse(h, s)


LAYOUTS = [
    [(("row",), ("dp",)), (("col",), ("tp",)), ((), ())],
    [(("col",), ("tp",)), (("row",), ("tp",)), ((), ())],
    [(("row", "col"), ("dp", "pp")), (("row", "col"), ("pp", "tp")), ((0,), ("tp",))],
    [(("row",), (("dp", "tp"),)), ((), ()), ((0,), ("pp",))],
]


@pytest.mark.parametrize("layouts", LAYOUTS, ids=range(len(LAYOUTS)))
def test_exact_results_have_the_bits_of_one_device(layouts: list[Any]) -> None:
    x, w, b = arr(12, 10), arr(10, 7), arr(7)
    args = [dist.from_numpy(a, mesh=M3, layout=dist.ShardSpec(*spec))
            for a, spec in zip((x, w, b), layouts)]
    f = ts.jit(program)
    got, want = f(*args), f(x, w, b)
    for g_, w_ in zip(got, want):
        assert isinstance(g_, ts.DistTensor) and g_.mesh is M3
        assert same_bits(g_, w_)


def test_fast_mode_adds_rounded_summands_in_rank_order() -> None:
    x, w = arr(4, 9), arr(9, 5)
    X, W = on(x, M3, ("col", "tp")), on(w, M3, ("row", "tp"))
    got = ts.jit(lambda a, b: ts.exp(a @ b), mode="fast")(X, W)
    parts = [x[:, k:k + 3] @ w[k:k + 3] for k in (0, 3, 6)]
    want = np.exp(functools.reduce(np.add, parts).astype(np.float64)).astype(np.float32)
    assert same_bits(got, want)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ts.jit(lambda a, b: ts.exp(
        a @ b))(x, w)), rtol=1e-5)


def test_each_distinct_block_is_computed_once_and_shared_by_replicas() -> None:
    X = on(arr(8, 6), M3, ("row", "dp"))
    Y = ts.jit(lambda a: ts.exp(a))(X)
    assert len({id(s) for s in Y.shards}) == 2  # dp=2 blocks for 12 devices
    assert Y.shards[0] is Y.shards[M3.index((0, 2, 1))]


def test_results_are_placed_as_the_ir_says() -> None:
    X, W = on(arr(8, 6), M3, ("row", "dp")), on(arr(6, 9), M3, ("col", "tp"))
    f = ts.jit(lambda a, b: a @ b)
    Y = f(X, W)
    assert Y.dim_axes == (("dp",), ("tp",)) and not Y.partial_axes
    assert "-> (tensor<8x9xf32, mesh<dp=2, tp=3, pp=2>[dp, tp]>)" in ts.inspect_ir(f)
    assert same_bits(Y, f(np.asarray(X), np.asarray(W)))


def test_eager_operators_on_dist_tensors() -> None:
    x, w = arr(6, 4), arr(4, 5)
    X, W = on(x, M3, ("row", "dp")), on(w, M3, ("col", "tp"))
    Y = ts.gemm(X, W)
    assert isinstance(Y, ts.DistTensor) and Y.dim_axes == (("dp",), ("tp",))
    assert same_bits(Y, ts.gemm(x, w))
    Z = ts.tanh(ts.sum(Y, axis=1))
    assert isinstance(Z, ts.DistTensor) and same_bits(Z, ts.tanh(ts.sum(ts.gemm(x, w),
                                                                       axis=1)))


def test_partial_arguments_are_summed_in_rank_order() -> None:
    parts = [arr(3, 4) for _ in range(3)]
    mesh = dist.mesh(axes=("tp",), shape=(3,))
    P = dist.from_shards(parts, mesh=mesh, partial="tp")
    total = functools.reduce(np.add, parts)
    assert same_bits(ts.jit(lambda p: ts.all_reduce(p, axis="tp"))(P), total)
    got = ts.jit(lambda p: ts.exp(p))(P)  # the pass inserts the all_reduce
    assert same_bits(got, np.exp(total.astype(np.float64)).astype(np.float32))


def test_max_reductions_meet_all_reduce_max() -> None:
    x = arr(6, 9)
    X = on(x, M3, ("row", "dp"), ("col", "tp"))
    f = ts.jit(lambda a: ts.all_reduce(ts.max(a, axis=1), axis="tp", op="max"))
    assert same_bits(f(X), np.max(x, axis=1))


def test_exact_sums_stay_exact_through_other_collectives() -> None:
    x = arr(6, 9)
    X = on(x, M3, ("row", "dp"), ("col", "tp"))
    f = ts.jit(lambda a: ts.all_gather(ts.sum(a, axis=1), axis="dp"))
    assert same_bits(f(X), ts.sum(x, axis=1))


def test_a_new_placement_traces_a_new_specialisation() -> None:
    f = ts.jit(lambda a: a * 2.0)
    x = arr(4, 6)
    f(on(x, M3, ("row", "dp")))
    f(on(x, M3, ("col", "tp")))
    f(x)
    assert len(f.cache) == 3


def test_numpy_and_static_arguments_beside_dist_tensors() -> None:
    x, y = arr(6, 4), arr(6, 4)
    f = ts.jit(lambda a, b, k: a * b + k)
    got = f(on(x, M3, ("row", "dp")), y, 3.0)
    assert same_bits(got, f(x, y, 3.0)) and got.dim_axes == (("dp",), ())
