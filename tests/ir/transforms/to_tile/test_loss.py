"""The mean squared error as a generated tile kernel: the graph interpreter's bits (the
exact sum of squares divided by the count, rounded once), for f32, bf16 and f16 with
non-finite values, cancelling pairs and magnitudes across the whole format; and the
quick start's training step compiled whole, its loss and gradient included."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import IRVerifyError
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.to_tile import TileGenerationError
from tessera.ir.types import TensorType
from tessera.numerics import dtype

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 3.0e38, -3.0e38, 1.0e-45, 1.0]


def _mse(a, b):
    return ts.mse(a, b)


def _bits(x) -> bytes:
    return np.asarray(x).tobytes()


@st.composite
def operands(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    fmt = FORMATS[draw(st.sampled_from(sorted(FORMATS)))]
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    n = math.prod(shape)
    finfo = ml_dtypes.finfo(fmt)
    top = int(math.log2(float(finfo.max)))
    values = st.one_of(
        st.sampled_from(SPECIAL),
        st.builds(lambda m, e: m * 2.0 ** e, st.floats(-2, 2), st.integers(-top - 20, top)))
    a = np.array(draw(st.lists(values, min_size=n, max_size=n)), np.float64)
    b = np.array(draw(st.lists(values, min_size=n, max_size=n)), np.float64)
    if draw(st.booleans()):  # near-cancelling pairs: the squares are tiny
        b = a * (1 + 2.0 ** -draw(st.integers(1, 30)))
    with np.errstate(all="ignore"):
        return a.astype(fmt).reshape(shape), b.astype(fmt).reshape(shape)


@settings(max_examples=60, deadline=None)
@given(operands())
def test_mse_kernel_gives_the_graph_bits(ab: tuple[np.ndarray, np.ndarray]) -> None:
    a, b = ab
    lowered = ts.jit(_mse).lower(a, b)
    assert len(lowered.kernels) == 1
    assert _bits(lowered.run(a, b, backend="tile")) == _bits(lowered.run(a, b))


def test_mse_rounds_the_mean_once() -> None:
    """The exact mean ``(1 + 2**-24 + 2**-78) / 4`` is just above an f32 midpoint; its
    float64 rounding drops the ``2**-78`` and lands on the midpoint, which then ties
    down. Rounded once (``tile.reduce``'s ``to``), as the graph does, it goes up."""
    a = np.array([1.0, 2.0 ** -12, 2.0 ** -39, 0.0], np.float32)
    b = np.zeros(4, np.float32)
    up = np.float32(0.25 * (1 + 2.0 ** -23))
    twice = np.float32(np.float64(0.25 * (1 + 2.0 ** -24)))
    assert twice == np.float32(0.25)  # the double rounding this test guards against
    assert _bits(ts.jit(_mse)(a, b)) == _bits(up)
    assert _bits(ts.jit(_mse, backend="tile")(a, b)) == _bits(up)


@pytest.mark.parametrize("backend", ["interp", "tile"])
def test_mse_keeps_the_sign_of_a_difference_float64_cannot_hold(backend: str) -> None:
    """``17 - 2**-72`` is not a float64: the difference is ``17`` plus an error of
    ``-2**-72``, whose sign decides the rounding. The exact mean is ``289 - 34 * 2**-72
    + 2**-144``, just below the bf16 midpoint 289 of 288 and 290, so it rounds to 288;
    an error term of the wrong sign lands just above the midpoint, on 290."""
    a = np.array([17.0], ml_dtypes.bfloat16)
    b = np.array([2.0 ** -72], ml_dtypes.bfloat16)
    got = ts.jit(_mse).lower(a, b).run(a, b, backend=backend)
    assert float(np.asarray(got)) == 288.0


def test_training_step_compiles_with_its_loss() -> None:
    """The quick start's step: the loss and its gradient as kernels, the graph's bits."""
    @ts.jit
    @ts.autodiff
    def train_step(x, y, W):
        return ts.mse(ts.gemm(x, W), y)

    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 64)).astype(np.float32)
    y = rng.standard_normal((32, 16)).astype(np.float32)
    W = (rng.standard_normal((64, 16)) * 0.1).astype(np.float32)
    lowered = ts.jit(ts.value_and_grad(train_step)).lower(x, y, W)
    assert len(lowered.kernels) == 3
    want, got = lowered.run(x, y, W), lowered.run(x, y, W, backend="tile")
    assert [_bits(g) for g in got] == [_bits(w) for w in want]


def test_mse_of_other_formats_is_refused_at_its_line() -> None:
    a = np.arange(6, dtype=np.int32)
    with pytest.raises(TileGenerationError, match="mean squared error of int32") as err:
        ts.jit(_mse, backend="tile")(a, a)
    assert "test_loss.py" in str(err.value)
    assert int(ts.jit(_mse)(a, a)) == 0  # the graph interpreter still runs it


def test_reduce_to_another_element_is_only_for_exact_sums() -> None:
    x = TensorType((4, 8), dtype("f64"))
    (r,) = tc.Reduce("mean", 1, exact=True, to=dtype("f32")).infer([x])
    assert r == TensorType((4,), dtype("f32"))
    with pytest.raises(IRVerifyError, match="only an exact sum or mean"):
        tc.Reduce("max", 1, to=dtype("f32")).infer([x])
    with pytest.raises(IRVerifyError, match="only an exact sum or mean"):
        tc.Reduce("sum", 1, exact=True, to=dtype("int32")).infer([x])
