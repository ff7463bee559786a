"""Distributed autodiff: the gradient of a placed program is placed like its primals
and has the bits of the single-device gradient of the same program (exact mode).

Convention (docs/distributed.md): a collective is the identity on the global value, so
its adjoint is the identity on the cotangent placed back like the operand
(all_gather <-> reduce_scatter, all_reduce <-> all_reduce, all_to_all <-> all_to_all).
A replicated cotangent is one contribution: a reduce_scatter of it sums nothing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import dist
from tessera.autodiff import vjp_function
from tessera.ir.transforms.sharding.propagation import propagate_function

RNG = np.random.default_rng(32)


def arr(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def on(a: np.ndarray, mesh: Any, *pairs: tuple[Any, Any]) -> ts.DistTensor:
    spec = dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    return dist.from_numpy(a, mesh=mesh, layout=spec)


def same_bits(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def test_the_backward_of_all_gather_is_a_reduce_scatter_that_sums_nothing() -> None:
    mesh = dist.mesh(axes=("tp",), shape=(3,))

    @ts.jit
    def loss(x: Any, W: Any) -> Any:
        y = ts.all_gather(ts.matmul(x, W), axis="tp")
        return ts.sum(y**2)

    x, w = arr(4, 5), arr(5, 6)
    W = on(w, mesh, ("col", "tp"))
    loss(x, W)
    assert loss.last is not None
    backward = propagate_function(vjp_function(loss.last.function, [1]))
    text = str(backward)
    # the cotangent of the replicated y is replicated: the reduce_scatter slices it
    assert 'graph.reduce_scatter' in text and \
        '{axis = "tp", dim = 1} : (tensor<4x6xf32, mesh<tp=3>[_, _]>)' in text
    grad_W = ts.grad(loss)(x, W)
    assert grad_W.dim_axes == W.dim_axes
    assert same_bits(grad_W, ts.grad(loss)(x, w))  # not 3 times the gradient


def test_tensor_parallel_mlp_gradients() -> None:
    mesh = dist.mesh(axes=("dp", "tp"), shape=(2, 2))

    def mlp(x: Any, W1: Any, W2: Any, y: Any) -> Any:
        return ts.mse(ts.matmul(ts.gelu(ts.matmul(x, W1)), W2), y)

    x, w1, w2, y = arr(6, 4), arr(4, 8), arr(8, 3), arr(6, 3)
    W1, W2 = on(w1, mesh, ("col", "tp")), on(w2, mesh, ("row", "tp"))
    X = on(x, mesh, ("row", "dp"))
    g = ts.grad(mlp, argnums=(0, 1, 2))
    got, want = g(X, W1, W2, y), g(x, w1, w2, y)
    for gd, gs, primal in zip(got, want, (X, W1, W2)):
        assert gd.dim_axes == primal.dim_axes and same_bits(gd, gs)


def test_data_parallel_gradients_are_all_reduced_once() -> None:
    mesh = dist.mesh(axes=("dp",), shape=(4,))
    x, y, w = arr(8, 5), arr(8, 2), arr(5, 2)
    X, Y = on(x, mesh, ("row", "dp")), on(y, mesh, ("row", "dp"))

    def step(x: Any, y: Any, W: Any) -> Any:
        return ts.mse(ts.matmul(x, W), y)

    grad_W = ts.grad(step)(X, Y, w)
    assert grad_W.placement("dp") == "replicated"
    assert same_bits(grad_W, ts.grad(step)(x, y, w))


def test_adjoints_of_the_other_collectives() -> None:
    mesh = dist.mesh(axes=("dp", "tp"), shape=(2, 2))
    x = arr(4, 6)
    X = on(x, mesh, ("row", "dp"))

    def f(a: Any) -> Any:
        b = ts.all_to_all(a, axis="dp", split_dim=1, concat_dim=0)
        c = dist.ppermute(b, axis="dp", perm=[(0, 1), (1, 0)])
        return ts.sum(ts.tanh(c) * ts.reduce_scatter(ts.all_reduce(c, axis="tp"), "tp", dim=0))

    got = ts.grad(f)(X)
    assert got.dim_axes == X.dim_axes
    # ppermute swaps the column halves; on one device the same function needs them swapped
    want = ts.grad(lambda a: ts.sum(ts.tanh(a) * a))(np.concatenate([x[:, 3:], x[:, :3]], 1))
    assert same_bits(got, np.concatenate([np.asarray(want)[:, 3:], np.asarray(want)[:, :3]], 1))


MESHES = [("x",), ("a", "b"), ("dp", "tp", "pp")]


@st.composite
def cases(draw: st.DrawFn) -> tuple[Any, list[Any]]:
    axes = draw(st.sampled_from(MESHES))
    shape = tuple(draw(st.integers(1, 3)) for _ in axes)
    mesh = dist.mesh(axes=axes, shape=shape)
    specs = []
    for rank in (2, 2, 1):
        dims: list[list[str]] = [[] for _ in range(rank)]
        for a in axes:
            where = draw(st.integers(-1, rank - 1))
            if where >= 0:
                dims[where].append(a)
        pairs = [(d, tuple(x) if len(x) > 1 else x[0]) for d, x in enumerate(dims) if x]
        specs.append(dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)))
    return mesh, specs


@settings(max_examples=30, deadline=None)
@given(cases(), st.integers(0, 2**31))
def test_distributed_gradients_equal_single_device_gradients(case: Any, seed: int) -> None:
    mesh, specs = case
    rng = np.random.default_rng(seed)
    values = [rng.standard_normal(s).astype(np.float32) for s in ((5, 4), (4, 6), (6,))]
    args = [dist.from_numpy(v, mesh=mesh, layout=s) for v, s in zip(values, specs)]

    def loss(x: Any, w: Any, b: Any) -> Any:
        h = ts.tanh(ts.matmul(x, w) + b)
        return ts.sum(h * h) + ts.mean(ts.softmax(h, axis=0) * x[:, :1])

    g = ts.value_and_grad(loss, argnums=(0, 1, 2))
    (v_d, g_d), (v_s, g_s) = g(*args), g(*values)
    assert same_bits(v_d, v_s)
    for gd, gs, a in zip(g_d, g_s, args):
        assert gd.dim_axes == a.dim_axes and same_bits(gd, gs)


def test_custom_rules_vjp_and_jvp_on_the_mesh() -> None:
    mesh = dist.mesh(axes=("dp", "tp"), shape=(2, 3))
    x = arr(6, 9)
    X = on(x, mesh, ("row", "dp"), ("col", "tp"))

    @ts.custom_vjp
    def cube(v: Any) -> Any:
        return v * v * v

    cube.defvjp(lambda v: (cube(v), v), lambda v, ct: ct * 3.0 * v * v)
    f = ts.jit(lambda v: ts.sum(cube(ts.tanh(v))))
    assert same_bits(ts.grad(f)(X), ts.grad(f)(x))
    out, pullback = ts.vjp(lambda v: ts.tanh(v) * 2.0, X)
    assert isinstance(out, ts.DistTensor) and out.dim_axes == X.dim_axes
    ct = arr(6, 9)
    (got,) = pullback(ct)
    assert got.dim_axes == X.dim_axes and same_bits(got, ts.vjp(
        lambda v: ts.tanh(v) * 2.0, x)[1](ct)[0])
    _, tangent = ts.jvp(lambda v: ts.sin(v), (X,), (ct,))
    assert same_bits(tangent, ts.jvp(lambda v: ts.sin(v), (x,), (ct,))[1])
