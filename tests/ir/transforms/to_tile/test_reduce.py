"""Reductions, norms and softmax as generated tile kernels: the graph interpreter's
bits (exact sums and means rounded once, the graph's signed zeros and NaNs of max and
min, the float64 softmax), in one kernel each, for f32, bf16 and f16."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.ir.transforms.to_tile import TileGenerationError, lower_module
from tests.ir.transforms.schedule import programs

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _same_bits(fn: Callable[..., Any], args: list[np.ndarray], kernels: int | None = None
               ) -> None:
    lowered = ts.jit(fn).lower(*args)
    if kernels is not None:
        assert len(lowered.kernels) == kernels
    want, got = lowered.run(*args), lowered.run(*args, backend="tile")
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert [np.asarray(g).tobytes() for g in got] == [np.asarray(w).tobytes() for w in want]


def _rows(fmt: str, seed: int = 0) -> np.ndarray:
    """Rows with the hard cases: a NaN, rows of +0 and of -0, a -0 beside negatives, an
    exact sum just above a rounding midpoint, values over a wide exponent range."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 128)) * 2.0 ** rng.integers(-8, 8, (64, 128))
    x[3, 5] = np.nan
    x[4, :], x[5, :] = 0.0, -0.0
    x[6, :7], x[6, 7] = -1.0, -0.0
    x[7, :], x[7, :3] = 0.0, [1.0, 2.0**-24, 2.0**-40]
    return x.astype(FORMATS[fmt])


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", ["layernorm", "rmsnorm", "softmax"])
def test_norms_and_softmax_give_the_graph_bits(name: str, fmt: str) -> None:
    fn, make = programs.PROGRAMS[name]
    args = [a.astype(FORMATS[fmt]) for a in make()]
    args[0] = _rows(fmt)
    _same_bits(fn, args, kernels=programs.KERNELS[name])


REDUCTIONS: dict[str, Callable[[Any], Any]] = {
    "sum": lambda x: op.sum(x, axis=-1),
    "mean": lambda x: op.mean(x, axis=-1, keepdims=True) * 2.0,
    "mean_axis0": lambda x: op.mean(x, axis=0),
    "max": lambda x: op.max(x, axis=-1),
    "min": lambda x: op.min(x, axis=-1, keepdims=True),
    "sum_all": lambda x: op.sum(x),
    "variance": lambda x: op.mean(x * x, axis=-1) - op.mean(x, axis=-1) ** 2.0,
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reductions_give_the_graph_bits(name: str, fmt: str) -> None:
    _same_bits(REDUCTIONS[name], [_rows(fmt)], kernels=1)


def test_integer_sums_saturate_as_the_graph_does() -> None:
    x = np.full((16, 64), 100, np.int8)
    _same_bits(lambda x: op.sum(x, axis=-1), [x])


def test_the_exact_sum_is_not_the_float64_sum() -> None:
    """1 + 2^-24 + 2^-80 lies above the f32 midpoint 1 + 2^-24: the exact sum rounds up,
    while a float64 sum drops 2^-80 and rounds the midpoint to even, down."""
    x = np.zeros((8, 16), np.float32)
    x[:, :3] = [1.0, 2.0**-24, 2.0**-80]
    assert x[0].astype(np.float64).sum().astype(np.float32) == 1.0
    lowered = ts.jit(lambda x: op.sum(x, axis=-1)).lower(x)
    assert "exact = true" in lowered.kernels[0].text
    assert np.asarray(lowered.run(x, backend="tile"))[0] == np.float32(1 + 2.0**-23)


def test_non_consecutive_axes_are_refused() -> None:
    x = np.zeros((4, 8, 16), np.float32)
    with pytest.raises(TileGenerationError, match="consecutive"):
        lower_module(ts.jit(lambda x: op.sum(x, axis=(0, 2))).compile(x).module)


@st.composite
def _chain(draw: st.DrawFn) -> tuple[list[str], str]:
    steps = draw(st.lists(st.sampled_from(["softmax", "center", "scale", "relu", "square"]),
                          min_size=1, max_size=4))
    return steps, draw(st.sampled_from(["sum", "mean", "max", "min", "none"]))


def _program(steps: list[str], last: str) -> Callable[[Any], Any]:
    def fn(x: Any) -> Any:
        for s in steps:
            if s == "softmax":
                x = op.softmax(x, axis=-1)
            elif s == "center":
                x = x - op.mean(x, axis=-1, keepdims=True)
            elif s == "scale":
                x = x * 3.0 + 0.5
            elif s == "relu":
                x = op.relu(x)
            else:
                x = x * x
        if last == "none":
            return x
        return {"sum": op.sum, "mean": op.mean, "max": op.max, "min": op.min}[last](
            x, axis=-1)
    return fn


@settings(max_examples=25, deadline=None)
@given(_chain(), st.sampled_from(sorted(FORMATS)), st.integers(0, 2**16),
       st.sampled_from([(16, 32), (48, 24), (8, 128)]))
def test_hypothesis_reduction_chains(chain: tuple[list[str], str], fmt: str, seed: int,
                                     shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2.0 ** rng.integers(-6, 6, shape)).astype(FORMATS[fmt])
    _same_bits(_program(*chain), [x])
