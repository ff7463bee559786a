"""Shared code of the interpreter tests: one-op functions and an independent rounding."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

from tessera.interp import run_function
from tessera.ir.core import Block, Builder, Function, Op
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: (stored mantissa bits, smallest normal exponent, largest finite, saturates) per format,
#: read from ml_dtypes / NumPy, not from tessera
FORMATS: dict[str, tuple[int, int, float, bool]] = {}
for _name, _np, _sat in [("f32", np.float32, False), ("bf16", ml_dtypes.bfloat16, False),
                         ("f16", np.float16, False), ("fp8_e4m3", ml_dtypes.float8_e4m3fn, True),
                         ("fp8_e5m2", ml_dtypes.float8_e5m2, True)]:
    _info = ml_dtypes.finfo(_np)
    FORMATS[_name] = (int(_info.nmant), int(_info.minexp), float(_info.max), _sat)


def one_op(op: Op, types: Sequence[TensorType]) -> Function:
    """A function of one op applied to its arguments, returning the op's results."""
    block = Block()
    args = [block.add_arg(t, f"x{k}") for k, t in enumerate(types)]
    b = Builder(block)
    results = b.create(op, args)
    b.create(graph_ir.Return(), results)
    return Function(op.name.split(".")[1], block, [r.type for r in results])


def run1(op: Op, *arrays: np.ndarray, elements: Sequence[Any] | None = None,
         mode: str = "exact") -> np.ndarray:
    """Run ``op`` on ``arrays`` through a one-op function; return its only result."""
    elements = elements or ["f32"] * len(arrays)
    types = [TensorType(a.shape, e) for a, e in zip(arrays, elements)]
    (out,) = run_function(one_op(op, types), list(arrays), mode=mode)
    return out


def ref_round(x: Any, name: str) -> np.ndarray:
    """Round float64 values to a format by scaling and np.rint (exact steps only)."""
    x = np.asarray(x, dtype=np.float64)
    np_type = storage_of(name).np_dtype
    if name == "f64":
        return x.copy()
    nmant, emin, top, sat = FORMATS[name]
    finite = np.isfinite(x)
    xf = np.where(finite, x, 0.0)
    _, e = np.frexp(xf)
    quantum = np.ldexp(1.0, np.maximum(e - 1, emin) - nmant)
    r = np.rint(xf / quantum) * quantum  # both steps exact: a power-of-two scaling
    r = np.where(finite, r, x)
    if sat:
        r = np.where(np.isnan(r), r, np.clip(r, -top, top))
    else:
        r = np.where(np.abs(r) > top, np.copysign(np.inf, r), r)
    r = np.where((r == 0) & finite, np.copysign(0.0, x), r)
    return r.astype(np_type)  # exact: every value is representable


def ref_round_fraction(q: Fraction, name: str) -> np.ndarray:
    """Round an exact rational to a format (half to even), as a 0-d storage array."""
    nmant, emin, top, sat = FORMATS[name]
    if q == 0:
        return np.zeros((), storage_of(name).np_dtype)
    e = math.floor(math.log2(abs(q)))
    while Fraction(2) ** e > abs(q):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(q):
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - nmant)
    v = round(q / quantum) * quantum
    value = float(v) if abs(v) <= Fraction(top) else (
        math.copysign(top, v) if sat else math.copysign(math.inf, v))
    if value == 0:  # a nonzero value that rounds to zero keeps its sign (IEEE)
        value = math.copysign(0.0, q)
    return np.asarray(value).astype(storage_of(name).np_dtype)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal values, NaN equal to NaN, signed zeros told apart, dtypes equal."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind in "biu":
        return bool(np.array_equal(a, b))
    wa, wb = np.asarray(a, np.complex128), np.asarray(b, np.complex128)
    parts = [(wa.real, wb.real), (wa.imag, wb.imag)]
    return all(np.array_equal(p, q, equal_nan=True)
               and np.array_equal(np.signbit(p), np.signbit(q)) for p, q in parts)


def stored(values: np.ndarray, name: str) -> np.ndarray:
    """Values rounded into a format's storage (the test inputs)."""
    return ref_round(values, name)
