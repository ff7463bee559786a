"""``ts.index_launch(axis=...)(fn)(*args)``: one traced body per index, local shards,
lockstep collectives that combine the values of all indices in index order."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.mesh_sim import reduce_in_order

RNG = np.random.default_rng(33)
M = dist.mesh(axes=("dp", "tp"), shape=(2, 3))


def arr(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def on(a: np.ndarray, *pairs: tuple[Any, Any], mesh: Any = M) -> ts.DistTensor:
    spec = dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    return dist.from_numpy(a, mesh=mesh, layout=spec)


def same_bits(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def test_gemm_tile_over_column_shards() -> None:
    x, w = arr(4, 8), arr(8, 10)  # 10 columns over tp=3: 4, 3, 3

    def gemm_tile(X: Any, W: Any) -> Any:
        return ts.gemm(X, W)

    Y = ts.index_launch(axis="tp")(gemm_tile)(x, on(w, ("col", "tp")))
    assert isinstance(Y, ts.DistTensor) and Y.dim_axes == ((), ("tp",))
    assert [Y.local_shape(M.index((0, k))) for k in range(3)] == [(4, 4), (4, 3), (4, 3)]
    assert same_bits(Y, ts.gemm(x, w))


def test_each_index_sees_its_local_view() -> None:
    seen: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []
    parts = [arr(2, 5) for _ in range(3)]
    P = dist.from_shards({M.index((0, k)): p for k, p in enumerate(parts)} | {
        M.index((1, k)): p for k, p in enumerate(parts)}, mesh=M, partial="tp")
    W = on(arr(6, 5), ("row", "dp"), ("col", "tp"))  # split over dp too: whole along dp

    def body(p: Any, w: Any) -> Any:
        seen.append((dist.axis_index("tp"), tuple(p.shape), tuple(w.shape)))
        return p

    out = ts.index_launch(axis="tp", out_dims="partial")(body)(P, W)
    assert seen == [(0, (2, 5), (6, 2)), (1, (2, 5), (6, 2)), (2, (2, 5), (6, 1))]
    assert out.partial_axes == ("tp",) and same_bits(out, functools.reduce(np.add, parts))


def test_collectives_combine_in_index_order() -> None:
    vals = np.array([[1e8], [1.0], [-1e8]], np.float32)  # order changes the bits
    V = on(vals, ("row", "tp"))

    def body(v: Any) -> Any:
        return ts.all_reduce(v, axis="tp")

    total = ts.index_launch(axis="tp")(body)(V)
    assert total.placement("tp") == "replicated"
    assert same_bits(total, reduce_in_order([vals[k:k + 1] for k in range(3)], ts.f32))
    assert np.asarray(total)[0] == np.float32(0.0)  # (1e8 + 1) - 1e8 in f32, index order


def test_local_view_collectives() -> None:
    x = arr(6, 4)
    X = on(x, ("row", "tp"))
    launch = ts.index_launch(axis="tp")

    gathered = launch(lambda a: ts.all_gather(a, axis="tp", dim=0))(X)
    assert same_bits(gathered, x) and gathered.placement("tp") == "replicated"
    scattered = ts.index_launch(axis="tp", out_dims=1)(
        lambda a: ts.reduce_scatter(a, axis="tp", dim=1))(X)
    assert scattered.dim_axes == ((), ("tp",))
    assert same_bits(scattered, reduce_in_order([x[0:2], x[2:4], x[4:6]], ts.f32))
    moved = launch(lambda a: dist.ppermute(a, axis="tp", perm=[(0, 1), (1, 2)]))(X)
    assert same_bits(moved, np.concatenate([np.zeros((2, 4), np.float32), x[0:4]]))
    root = launch(lambda a: dist.broadcast(a, axis="tp", root=2))(X)
    assert same_bits(root, x[4:6])
    swapped = launch(lambda a: ts.all_to_all(a, axis="tp", split_dim=1, concat_dim=0))(
        on(arr(6, 6), ("row", "tp")))
    assert swapped.local_shape(0) == (6, 2)


def test_outputs_are_replicated_sharded_or_partial() -> None:
    x = arr(6, 4)
    X = on(x, ("row", "tp"))
    same = ts.index_launch(axis="tp")(lambda a, b: b * 2.0)(X, x)
    assert same.placement("tp") == "replicated" and same_bits(same, x * 2)
    cols = ts.index_launch(axis="tp", out_dims=1)(lambda a: ts.transpose(a))(X)
    assert cols.dim_axes == ((), ("tp",)) and same_bits(cols, x.T)
    summed = ts.index_launch(axis="tp", out_dims="partial")(lambda a: ts.sum(a, axis=0))(X)
    assert same_bits(summed, functools.reduce(np.add, [x[0:2].sum(0), x[2:4].sum(0),
                                                       x[4:6].sum(0)]))


def test_a_jit_function_as_the_body_and_per_index_control_flow() -> None:
    @ts.jit
    def scale(a: Any) -> Any:
        k = dist.axis_index("tp")
        return a * float(k) if k else a

    x = arr(6, 4)
    got = ts.index_launch(axis="tp")(scale)(on(x, ("row", "tp")))
    assert same_bits(got, np.concatenate([x[0:2], x[2:4], x[4:6] * 2]))


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_modes(mode: str) -> None:
    x, w = arr(4, 9), arr(9, 3)
    Wr = on(w, ("row", "tp"))

    def rowpar(X: Any, W: Any) -> Any:
        k = dist.axis_index("tp")
        return ts.all_reduce(ts.gemm(X[:, 3 * k:3 * k + 3], W), axis="tp")

    got = ts.index_launch(axis="tp", mode=mode)(rowpar)(x, Wr)
    parts = [np.asarray(ts.gemm(x[:, 3 * k:3 * k + 3], w[3 * k:3 * k + 3])) for k in range(3)]
    if mode == "exact":
        assert same_bits(got, reduce_in_order(parts, ts.f32))
    np.testing.assert_allclose(np.asarray(got), x.astype(np.float64) @ w, rtol=1e-5,
                               atol=1e-5)


@ts.kernel
def saxpy(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32],
          alpha: ts.f32) -> ts.Tensor["n", ts.f32]:
    i = ts.tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
    return y


def test_a_tile_kernel_per_index_writes_its_shard_in_place() -> None:
    mesh = dist.mesh(axes=("tp",), shape=(3,))
    x, y = arr(10), arr(10)
    X = on(x, ("row", "tp"), mesh=mesh)
    Y = on(y.copy(), ("row", "tp"), mesh=mesh)
    out = ts.index_launch(axis="tp")(saxpy)(X, Y, 2.0, group_size=4)
    want = (np.float32(2.0) * x + y).astype(np.float32)
    assert out.dim_axes == (("tp",),) and same_bits(out, want) and same_bits(Y, want)
    summands = dist.from_shards([arr(10) for _ in range(3)], mesh=mesh, partial="tp")
    shared = dist.from_numpy(y.copy(), mesh=mesh)  # replicated: each index writes all of it
    with pytest.raises(ts.RegionConflictError, match="different values"):
        ts.index_launch(axis="tp")(saxpy)(summands, shared, 2.0)


def test_bodies_are_traced_in_lockstep_so_local_shapes_follow_collectives() -> None:
    w = arr(12, 10)  # 10 columns over tp=3: 4, 3, 3
    W = on(w, ("col", "tp"))
    seen = []

    def body(W: Any) -> Any:
        full = ts.all_gather(W, axis="tp", dim=1)
        seen.append(tuple(full.shape))
        piece = ts.reduce_scatter(full, axis="tp", dim=0)
        seen.append(tuple(piece.shape))
        return ts.sum(ts.reshape(full, (120,)))

    total = ts.index_launch(axis="tp", out_dims="partial")(body)(W)
    assert seen == [(12, 10)] * 3 + [(4, 10)] * 3  # every index meets, then goes on
    assert same_bits(total, reduce_in_order([np.asarray(ts.sum(w))] * 3, ts.f32))


def test_an_error_in_one_body_is_raised_at_its_line() -> None:
    def body(a: Any) -> Any:
        if dist.axis_index("tp") == 2:
            return ts.matmul(a, a)  # here
        return ts.all_reduce(a, axis="tp")

    with pytest.raises(ts.ShapeError) as info:
        ts.index_launch(axis="tp")(body)(on(arr(6, 4), ("row", "tp")))
    assert "matmul" in str(info.value) and "# here" in open(__file__).read().splitlines()[
        info.value.loc.line - 1]
