"""Placed graph programs compiled per device on a 2 x 4 mesh: every device's fused
kernels in the tile simulator, the collectives between them in the mesh simulator, give
the bits of the graph interpreter's sharded run (which are those of one device)."""

from __future__ import annotations

import inspect
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import dist, op
from tessera.errors import UnsupportedError
from tessera.ir.transforms.to_tile import TileGenerationError

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}
ROWS = ("row", ("dp", "tp"))  # the batch split eight ways


def place(a: np.ndarray, *pairs: tuple[Any, Any]) -> ts.DistTensor:
    spec = dist.ShardSpec(tuple(p[0] for p in pairs), tuple(p[1] for p in pairs))
    return dist.from_numpy(a, mesh=MESH, layout=spec)


def draw(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape).astype(DTYPES[dtype])


def same_bits(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def check(fn: Any, args: tuple[Any, ...], mode: str = "exact") -> None:
    """``backend="tile"`` has the interpreter's bits, on the interpreter's mesh (fast
    mode keeps no bit contract, BLAS adds in its own order: its values agree)."""
    got = ts.jit(fn, backend="tile", mode=mode)(*args)
    want = ts.jit(fn, mode=mode)(*args)
    assert isinstance(got, ts.DistTensor) and got.mesh is MESH
    assert got.dim_axes == want.dim_axes and got.partial_axes == want.partial_axes
    if mode == "fast":
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    else:
        assert same_bits(got, want)


def mlp(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.gelu(x @ w1 + b1) @ w2 + b2


def layernorm(x, g, b):  # type: ignore[no-untyped-def]
    mu = op.mean(x, axis=-1, keepdims=True)
    d = x - mu
    return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g + b


def softmax(x):  # type: ignore[no-untyped-def]
    return op.softmax(x * 0.5, axis=-1)


def chain(x, y):  # type: ignore[no-untyped-def]
    return op.maximum(x * y + 1.0, x - y) * 0.5 - op.abs(y)


@pytest.mark.parametrize("rows", [("row", "dp"), ROWS], ids=["dp", "dp*tp"])
def test_data_parallel_mlp(rows: tuple[Any, Any]) -> None:
    rng = np.random.default_rng(0)
    x, w1, b1, w2, b2 = (draw(rng, s, "f32") for s in [(16, 8), (8, 32), (32,), (32, 8),
                                                        (8,)])
    check(mlp, (place(x, rows), place(w1), place(b1), place(w2), place(b2)))


@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_tensor_parallel_matmul_pair(mode: str) -> None:
    """Column-parallel then row-parallel, the all-reduce between (in exact mode the
    partial sum is evaluated once, after it, on gathered operands)."""
    rng = np.random.default_rng(1)
    x, w1, b1, w2, b2 = (draw(rng, s, "f32") for s in [(16, 8), (8, 32), (32,), (32, 8),
                                                        (8,)])
    args = (place(x, ("row", "dp")), place(w1, ("col", "tp")), place(b1, (0, "tp")),
            place(w2, ("row", "tp")), place(b2))
    check(mlp, args, mode)


def test_rows_reduced_on_batch_sharded_rows() -> None:
    rng = np.random.default_rng(2)
    x, g, b = draw(rng, (16, 32), "f32"), draw(rng, (32,), "f32"), draw(rng, (32,), "f32")
    check(layernorm, (place(x, ROWS), place(g), place(b)))
    check(softmax, (place(x, ("row", "dp")),))


def test_elementwise_chain_on_a_two_dim_layout() -> None:
    rng = np.random.default_rng(3)
    x, y = draw(rng, (16, 32), "f32"), draw(rng, (16, 32), "f32")
    layout = (("row", "dp"), ("col", "tp"))
    check(chain, (place(x, *layout), place(y, *layout)))


def test_sums_over_the_sharded_dim_are_completed_exactly() -> None:
    rng = np.random.default_rng(4)
    x = draw(rng, (16, 8), "f32") * np.float32(1e4)
    X = place(x, ROWS)
    check(lambda a: op.sum(a * a, axis=0), (X,))
    check(lambda a: op.mean(a, axis=0, keepdims=True), (X,))
    check(lambda a: op.mean(a, axis=0, keepdims=True), (X,), mode="fast")


@settings(max_examples=40, deadline=None, derandomize=True)
@given(b=st.integers(8, 20), d=st.integers(1, 12), h=st.integers(4, 20),
       dtype=st.sampled_from(["f32", "bf16"]), which=st.sampled_from(["dp", "tp", "ln", "ew"]))
def test_drawn_shapes_and_formats(b: int, d: int, h: int, dtype: str, which: str) -> None:
    """Uneven blocks too: devices whose blocks differ in shape run their own kernels."""
    rng = np.random.default_rng(b * 1000 + d * 10 + h)
    if which in ("dp", "tp"):
        x, w1, b1, w2, b2 = (draw(rng, s, dtype) for s in [(b, d), (d, h), (h,), (h, d),
                                                            (d,)])
        if which == "dp":
            args = (place(x, ROWS), place(w1), place(b1), place(w2), place(b2))
        else:
            args = (place(x, ("row", "dp")), place(w1, ("col", "tp")), place(b1, (0, "tp")),
                    place(w2, ("row", "tp")), place(b2))
        check(mlp, args)
    elif which == "ln":
        x, g, bias = draw(rng, (b, h), dtype), draw(rng, (h,), dtype), draw(rng, (h,), dtype)
        check(layernorm, (place(x, ROWS), place(g), place(bias)))
    else:
        x, y = draw(rng, (b, h), dtype), draw(rng, (b, h), dtype)
        check(chain, (place(x, ("row", "dp"), ("col", "tp")),
                      place(y, ("row", "dp"), ("col", "tp"))))


def sine_mlp(x, w):  # type: ignore[no-untyped-def]
    return op.sin(x @ w)


def test_an_op_the_scheduler_cannot_compile_names_op_and_line() -> None:
    rng = np.random.default_rng(5)
    args = (place(draw(rng, (16, 8), "f32"), ROWS), place(draw(rng, (8, 4), "f32")))
    with pytest.raises(TileGenerationError) as err:
        ts.jit(sine_mlp, backend="tile")(*args)
    _, start = inspect.getsourcelines(sine_mlp)
    assert "graph.sin" in str(err.value)
    assert f"test_bits.py:{start + 1}:" in str(err.value)
    assert isinstance(err.value, UnsupportedError)
    got = ts.jit(sine_mlp)(*args)  # the interpreter still runs it on the mesh
    assert isinstance(got, ts.DistTensor) and got.shape == (16, 4)
