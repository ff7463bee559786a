"""Rows one element wide: a ``(R, 1)`` tile shares its layout class with its own
``keepdims`` row reduction (an elementwise op joins them), so the layout pass places
the tile as row statistics (``BRow``), whose registers are those of the blocked tile.
The programs that meet such a tile give the graph interpreter's bits under
``backend="target"`` on sm_80 and sm_90a, and their kernels assemble without spills:

* an exact matmul with one output column, then a reduction over its rows;
* a one-row tile (a column sum, a ``(1, 1)`` operand) broadcast from memory into
  those rows;
* a norm whose scale and shift cover rows of one element;
* such rows staged through shared memory as the operand of another exact matmul.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import op
from tests.frontend.graph.lowered.same import TARGETS, assembles_clean, same_on_target

FORMATS = {"f32": ts.f32, "bf16": ts.bf16, "fp8_e4m3": ts.fp8_e4m3}


def _rms(x):  # type: ignore[no-untyped-def]
    return x / op.sqrt(op.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def matmul_centred(x, w):  # type: ignore[no-untyped-def]
    y = op.relu(x @ w)
    return y - op.mean(y, axis=-1, keepdims=True)


def matmul_row_sum(x, w):  # type: ignore[no-untyped-def]
    y = x @ w
    return op.sum(y, axis=-1, keepdims=True) * y


def column_sum_normed(x):  # type: ignore[no-untyped-def]
    return _rms(op.sum(x, axis=0, keepdims=True) + x)


def shifted_normed(x, b):  # type: ignore[no-untyped-def]
    return _rms(x + b)


def rmsnorm(x, g):  # type: ignore[no-untyped-def]
    return _rms(x) * g


def layernorm(x, g, b):  # type: ignore[no-untyped-def]
    d = x - op.mean(x, axis=-1, keepdims=True)
    return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g + b


def normed_matmul(x, w):  # type: ignore[no-untyped-def]
    return _rms(op.gelu(_rms(x)) @ w)


#: (program, argument shapes): every program meets a (rows, 1) tile held as row statistics
CASES: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    "exact matmul, one column, centred": (matmul_centred, [(5, 3), (3, 1)]),
    "exact matmul, 1 x 1, row sum": (matmul_row_sum, [(1, 1), (1, 1)]),
    "exact matmul, 300 rows, centred": (matmul_centred, [(300, 9), (9, 1)]),
    "column sum broadcast into rows": (column_sum_normed, [(4, 1)]),
    "column sum over 260 rows": (column_sum_normed, [(260, 1)]),
    "(1, 1) operand broadcast into rows": (shifted_normed, [(5, 1), (1, 1)]),
    "rms norm scale": (rmsnorm, [(6, 1), (1,)]),
    "rms norm scale, 300 rows": (rmsnorm, [(300, 1), (1,)]),
    "layer norm scale and shift": (layernorm, [(5, 1), (1,), (1,)]),
    "rows staged for an exact matmul": (normed_matmul, [(7, 1), (1, 1)]),
}


def _args(shapes: list[tuple[int, ...]], fmt: str, seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    return [ts.Tensor(rng.standard_normal(s), FORMATS[fmt]).array for s in shapes]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_rows_one_element_wide_give_the_graph_bits(name: str, fmt: str) -> None:
    fn, shapes = CASES[name]
    same_on_target(fn, _args(shapes, fmt, seed=len(name)), TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_rows_one_element_wide_assemble_without_spills(target: str) -> None:
    for name in ("exact matmul, one column, centred", "column sum broadcast into rows",
                 "layer norm scale and shift", "rows staged for an exact matmul"):
        fn, shapes = CASES[name]
        args = _args(shapes, "f32", seed=1)
        for kernel in ts.jit(fn).lower(*args).target(target).kernels:
            assembles_clean(kernel)
