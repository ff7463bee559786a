"""Programs on meshes with more devices than elements, and keepdims reductions.

With ``numpy.array_split`` a dim of 5 elements over 8 devices leaves 3 devices with
empty shards; the distributed value must still have the bits of one device's. The
references are the same programs run on plain NumPy arrays (one device), checked in
turn against NumPy float64 where the values are exact.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.mesh_sim.reduce import identity, reduce_in_order
from tessera.numerics import dtype


def _bits(x: object) -> tuple[tuple[int, ...], str, bytes]:
    a = np.asarray(x)
    return a.shape, a.dtype.str, a.tobytes()


def _rows(mesh: dist.Mesh, x: np.ndarray, axes: object = "tp") -> dist.DistTensor:
    return dist.from_numpy(x, mesh=mesh, layout=dist.ShardSpec(("row",), (axes,)))


@pytest.mark.parametrize("n", [1, 2, 5, 7])
@pytest.mark.parametrize("name", ["max", "min", "sum", "mean"])
def test_reductions_over_a_dim_with_empty_shards(n, name) -> None:
    mesh = dist.mesh(axes=("tp",), shape=(8,))
    v = (np.arange(n, dtype=np.float32) - 2.5) * 1.25
    f = ts.jit(lambda x: getattr(ts, name)(x))
    got = f(_rows(mesh, v))
    assert isinstance(got, ts.DistTensor)
    assert _bits(got) == _bits(f(v))
    assert float(np.asarray(got)) == getattr(np, name)(v.astype(np.float64))


@pytest.mark.parametrize("element", ["f32", "bf16", "f16", "fp8_e4m3", "fp4_e2m1", "int32"])
def test_empty_shard_candidates_never_win(element) -> None:
    # Values at the bottom of each format's range: an identity that was a real value
    # (or a NaN, for formats without infinities) would show in the result.
    np_dtype = dtype(element).np_dtype
    low = identity(element, "max")
    data = np.array([low, 3, low, 2, low] if np.isfinite(low) else [-7, 3, -9, 2, -7],
                    np.float64).astype(np_dtype)
    mesh = dist.mesh(axes=("tp",), shape=(8,))
    X = dist.tensor(shape=(5,), mesh=mesh, dtype=element, data=data,
                    layout=dist.ShardSpec(("row",), ("tp",)))
    for name in ("max", "min"):
        f = ts.jit(lambda x, name=name: getattr(ts, name)(x, keepdims=True))
        got = np.asarray(f(X))
        assert _bits(got) == _bits(f(data))
        want = getattr(np, name)(data.astype(np.float64))
        assert got.dtype == np_dtype and float(got[0]) == want


@pytest.mark.parametrize("is_max", [True, False])
def test_signed_zeros_and_nans_combine_as_on_one_device(is_max) -> None:
    mesh = dist.mesh(axes=("tp",), shape=(4,))
    name = "max" if is_max else "min"
    rows = np.array([[0.0, -0.0, -1.0, 1.0], [-0.0, 0.0, -3.0, -2.0], [-0.0, -0.0, 0.0, -0.0],
                     [math.nan, 0.0, -math.nan, -0.0]], np.float32)
    for v in (rows, rows[:, ::-1].copy(), rows.T.copy()):
        f = ts.jit(lambda x: getattr(ts, name)(x, axis=1))
        g = ts.jit(lambda x: getattr(ts, name)(x, axis=0))
        layout = dist.ShardSpec(("col",), ("tp",))
        assert _bits(f(dist.from_numpy(v, mesh=mesh, layout=layout))) == _bits(f(v))
        assert _bits(g(_rows(mesh, v))) == _bits(g(v))


def test_rank_order_max_of_zeros_does_not_depend_on_the_order() -> None:
    pos, neg = np.zeros(3, np.float32), -np.zeros(3, np.float32)
    for parts in ([pos, neg], [neg, pos], [neg, neg, pos]):
        assert not np.signbit(reduce_in_order(parts, "f32", "max")).any()
        assert np.signbit(reduce_in_order(parts, "f32", "min")).all()
    nans = [np.array([-np.nan], np.float32), np.array([np.nan], np.float32)]
    assert _bits(reduce_in_order(nans, "f32", "max")) == _bits(np.array([np.nan], np.float32))


@pytest.mark.parametrize(("n", "m"), [(5, 1), (2, 1), (9, 1), (5, 5), (3, 3), (1, 1)])
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min"])
def test_keepdims_reduction_meets_a_sharded_operand(n, m, name) -> None:
    mesh = dist.mesh(axes=("tp",), shape=(8,))
    v = np.linspace(-2.0, 3.0, n).astype(np.float32)
    w = np.linspace(4.0, -1.0, m).astype(np.float32)
    V, W = _rows(mesh, v), _rows(mesh, w)
    reduce = getattr(ts, name)
    for fn in (lambda a, b: ts.maximum(reduce(a, keepdims=True), b),
               lambda a, b: ts.mul(ts.minimum(b, reduce(a, keepdims=True)), 2.0)):
        want = _bits(fn(v, w))
        assert _bits(fn(V, W)) == want                # eager, on the mesh
        assert _bits(ts.jit(fn)(V, W)) == want


def test_keepdims_sum_scattered_onto_a_size_one_dim_of_a_2d_mesh() -> None:
    mesh = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
    v = np.arange(15, dtype=np.float32).reshape(5, 3) / 7
    w = np.arange(3, dtype=np.float32).reshape(1, 3)
    f = ts.jit(lambda a, b: ts.maximum(ts.sum(a, axis=0, keepdims=True), b))
    V = dist.from_numpy(v, mesh=mesh, layout=dist.ShardSpec(("row", "col"), ("dp", "tp")))
    W = dist.from_numpy(w, mesh=mesh, layout=dist.ShardSpec(("row",), (("dp", "tp"),)))
    got = f(V, W)
    assert _bits(got) == _bits(f(v, w))
    assert np.array_equal(np.asarray(got), np.maximum(v.sum(0, keepdims=True), w))


def test_scalar_results_on_a_one_device_mesh_are_arrays() -> None:
    mesh = dist.mesh(axes=("tp",), shape=(1,))
    v = np.array([0.5, -1.5], np.float32)
    for name in ("max", "min", "sum", "mean"):
        got = ts.jit(lambda x, name=name: getattr(ts, name)(x))(_rows(mesh, v))
        assert isinstance(got.shard(0), np.ndarray) and got.shard(0).shape == ()
        assert float(np.asarray(got)) == getattr(np, name)(v)


def test_gradients_through_empty_shards_equal_one_device() -> None:
    mesh = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
    v = np.array([[1.0, -2.0, 3.0], [0.5, 3.0, -1.0]], np.float32)

    def loss(x):
        return ts.sum(ts.max(x, axis=1, keepdims=True) * ts.min(x, axis=0, keepdims=True))

    X = dist.from_numpy(v, mesh=mesh, layout=dist.ShardSpec(("row", "col"), ("dp", "tp")))
    got = ts.grad(loss)(X)
    assert got.dim_axes == X.dim_axes
    assert _bits(got) == _bits(ts.grad(loss)(v))
    assert _bits(ts.jit(loss)(X)) == _bits(ts.jit(loss)(v))


def test_low_precision_identity_is_below_every_value() -> None:
    for element in ("fp8_e4m3", "fp4_e2m1", "bf16", "int8"):
        np_dtype = dtype(element).np_dtype
        lo, hi = identity(element, "max"), identity(element, "min")
        if np.dtype(np_dtype).kind == "i":
            assert (lo, hi) == (np.iinfo(np_dtype).min, np.iinfo(np_dtype).max)
            continue
        info = ml_dtypes.finfo(np_dtype)
        assert lo <= float(info.min) and hi >= float(info.max)
        assert not np.isnan(np.asarray([lo, hi]).astype(np_dtype).astype(np.float64)).any()
