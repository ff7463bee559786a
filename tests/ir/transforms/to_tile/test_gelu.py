"""GELU, tanh and erf as generated tile kernels with the graph interpreter's bits (its
float64 algorithms, op for op on f64 tiles, rounded once), and the MLP
``gelu(x @ W1 + b1) @ W2 + b2`` as two kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import op
from tests.ir.transforms.schedule import programs

FORMATS = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def _bits(x: object) -> bytes:
    return np.asarray(x).tobytes()


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_the_gelu_mlp_is_two_kernels_with_the_graph_bits(fmt: str) -> None:
    fn, make = programs.PROGRAMS["mlp"]
    args = [a.astype(FORMATS[fmt]) for a in make()]
    lowered = ts.jit(fn).lower(*args)
    assert len(lowered.kernels) == programs.KERNELS["mlp"] == 2
    assert "tile.exp" in lowered.ir("tile") and "tile.tanh" not in lowered.ir("tile")
    assert _bits(lowered.run(*args, backend="tile")) == _bits(lowered.run(*args))


UNARY: dict[str, Callable[[Any], Any]] = {
    "gelu_tanh": op.gelu,
    "gelu_erf": lambda x: op.gelu(x, approximate=False),
    "tanh": op.tanh,
    "erf": op.erf,
}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_ops_give_the_graph_bits(name: str, fmt: str) -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((32, 64)) * 2.0 ** rng.integers(-10, 6, (32, 64))
    x[0, :6] = [np.inf, -np.inf, np.nan, -0.0, 0.0, 1e30]
    with np.errstate(over="ignore"):
        x = x.astype(FORMATS[fmt])
    lowered = ts.jit(UNARY[name]).lower(x)
    assert _bits(lowered.run(x, backend="tile")) == _bits(lowered.run(x))
