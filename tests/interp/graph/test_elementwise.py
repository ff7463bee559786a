"""Every elementwise rule against an independent float64 NumPy reference, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.errors import InterpretError
from tessera.interp import run_function
from tessera.ir.dialects import graph as graph_ir
from tessera.ir.types import Dense
from tessera.numerics.transcendental.erf64 import erf_f64_specified
from tessera.numerics.transcendental.exp import exp_f32
from tessera.numerics.transcendental.gelu64 import (
    gelu_erf_f64_specified,
    gelu_tanh_f64_specified,
)
from tessera.numerics.transcendental.log64 import log_f64_specified
from tessera.numerics.transcendental.tanh64 import tanh_f64_specified
from tests.interp.graph.util import one_op, ref_round, run1, same, stored

ELEMENTS = ["f32", "bf16", "fp8_e4m3"]
SETTINGS = settings(max_examples=50, deadline=None)

UNARY_REF = {
    graph_ir.Neg: np.negative,
    # the specified, correctly rounded f32 exp (every element here fits f32), then the
    # element's rounding: the definition, checked against decimal in tests/numerics
    graph_ir.Exp: lambda x: exp_f32(x.astype(np.float32)).astype(np.float64),
    graph_ir.Log: log_f64_specified,  # specified, checked against decimal
    graph_ir.Tanh: tanh_f64_specified,  # specified, checked against decimal
    graph_ir.Sqrt: np.sqrt,
    graph_ir.Sign: np.sign,
    # sin and cos of formats of up to 32 bits: rounded to f32, then to the element (the
    # decimal-decided elements near an f32 midpoint are tested in test_rounded_functions)
    graph_ir.Sin: lambda x: np.sin(x).astype(np.float32).astype(np.float64),
    graph_ir.Cos: lambda x: np.cos(x).astype(np.float32).astype(np.float64),
    graph_ir.Round: np.round,
    graph_ir.Conj: np.conj,
    graph_ir.Abs: np.abs,
    graph_ir.Real: np.real,
    graph_ir.Imag: np.zeros_like,
    graph_ir.Relu: lambda x: np.where((x > 0) | np.isnan(x), x, 0.0),
    # the specified binary64 erf, checked against decimal in tests/numerics
    graph_ir.Erf: erf_f64_specified,
}
def _ieee_extremum(is_max: bool):
    """IEEE 754-2019 maximum/minimum (sec. 9.6): a NaN wins, and +0 is above -0 (NumPy's
    ``maximum`` returns its second operand of two equal zeros)."""
    def fn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.maximum(a, b) if is_max else np.minimum(a, b)
        both = (a == 0) & (b == 0)
        keep_negative = np.signbit(a) & np.signbit(b) if is_max else \
            np.signbit(a) | np.signbit(b)
        return np.where(both, np.copysign(0.0, np.where(keep_negative, -1.0, 1.0)), out)
    return fn


BINARY_REF = {
    graph_ir.Add: np.add,
    graph_ir.Sub: np.subtract,
    graph_ir.Mul: np.multiply,
    graph_ir.Div: np.divide,
    graph_ir.Pow: lambda a, b: np.power(a, b).astype(np.float32).astype(np.float64),
    graph_ir.Maximum: _ieee_extremum(True),
    graph_ir.Minimum: _ieee_extremum(False),
}
COMPARE_REF = {graph_ir.Gt: np.greater, graph_ir.Ge: np.greater_equal, graph_ir.Lt: np.less,
               graph_ir.Le: np.less_equal, graph_ir.Eq: np.equal, graph_ir.Ne: np.not_equal}


@st.composite
def operands(draw: st.DrawFn, count: int, lo: float = -6.0, hi: float = 6.0):
    """(element name, arrays stored in that element) with a shared random shape."""
    name = draw(st.sampled_from(ELEMENTS))
    shape = tuple(draw(st.lists(st.integers(1, 5), max_size=3)))
    n = math.prod(shape)
    special = st.sampled_from([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-3, 300.0])
    value = st.floats(lo, hi, allow_nan=False, width=64) | special
    arrays = [stored(np.array(draw(st.lists(value, min_size=n, max_size=n)),
                              dtype=np.float64).reshape(shape), name) for _ in range(count)]
    return name, arrays


#: ops that move a NaN as it is (the others compute the default NaN, see graph_elementwise)
MOVES_NAN = (graph_ir.Neg, graph_ir.Conj, graph_ir.Real, graph_ir.Imag, graph_ir.Relu)


def _default_nan(x: np.ndarray) -> np.ndarray:
    """A NaN an op computes is NumPy's ``np.nan``, whatever its operands' NaN signs."""
    return np.where(np.isnan(x), np.nan, x)


@SETTINGS
@given(st.sampled_from(sorted(UNARY_REF, key=lambda c: c.name)), operands(1))
def test_unary_matches_float64_reference(op_cls, case) -> None:
    name, (x,) = case
    with np.errstate(all="ignore"):
        want = UNARY_REF[op_cls](x.astype(np.float64))
    want = ref_round(want if op_cls in MOVES_NAN else _default_nan(want), name)
    assert same(run1(op_cls(), x, elements=[name]), want)


@SETTINGS
@given(st.booleans(), operands(1))
def test_gelu_both_forms(approximate, case) -> None:
    name, (x,) = case
    w = x.astype(np.float64)
    with np.errstate(all="ignore"):
        # the specified algorithms, checked against decimal in tests/numerics/transcendental/
        ref = gelu_tanh_f64_specified(w) if approximate else gelu_erf_f64_specified(w)
    assert same(run1(graph_ir.Gelu(approximate), x, elements=[name]),
                ref_round(_default_nan(ref), name))


@SETTINGS
@given(st.sampled_from(sorted(BINARY_REF, key=lambda c: c.name)), operands(2))
def test_binary_matches_float64_reference(op_cls, case) -> None:
    name, (a, b) = case
    with np.errstate(all="ignore"):
        want = ref_round(_default_nan(BINARY_REF[op_cls](a.astype(np.float64),
                                                         b.astype(np.float64))), name)
    assert same(run1(op_cls(), a, b, elements=[name, name]), want)


@SETTINGS
@given(st.sampled_from(sorted(COMPARE_REF, key=lambda c: c.name)), operands(2))
def test_comparisons(op_cls, case) -> None:
    name, (a, b) = case
    want = COMPARE_REF[op_cls](a.astype(np.float64), b.astype(np.float64))
    assert same(run1(op_cls(), a, b, elements=[name, name]), want)


@SETTINGS
@given(operands(2))
def test_where_selects_stored_values(case) -> None:
    name, (a, b) = case
    cond = a.astype(np.float64) > b.astype(np.float64)
    out = run1(graph_ir.Where(), cond, a, b, elements=["bool", name, name])
    assert same(out, np.where(cond, a, b))


@SETTINGS
@given(operands(1, -1e6, 1e6), st.sampled_from(["f32", "bf16", "f16", "fp8_e4m3",
                                                 "fp8_e5m2"]))
def test_cast_rounds_once_to_nearest_even(case, to) -> None:
    name, (x,) = case
    assert same(run1(graph_ir.Cast(to), x, elements=[name]), ref_round(x.astype(np.float64), to))


def test_cast_of_float64_rounds_once_not_via_float32() -> None:
    # 1 + 2**-4 + 2**-30 is just above an fp8_e4m3 midpoint; through float32 it would land
    # on the midpoint and tie to even (down).
    x = np.array([1 + 2**-4 + 2**-30, -(1 + 2**-4 + 2**-30)])
    out = run1(graph_ir.Cast("fp8_e4m3"), x, elements=["f64"])
    assert out.astype(np.float64).tolist() == [1.125, -1.125]


def test_fp8_saturates() -> None:
    x = np.array([1000.0, -1e9, np.inf, 464.0, 400.0], dtype=np.float32)
    out = run1(graph_ir.Cast("fp8_e4m3"), x)
    assert out.astype(np.float64).tolist() == [448.0, -448.0, 448.0, 448.0, 384.0]


@SETTINGS
@given(st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=6),
       st.sampled_from(ELEMENTS))
def test_constant_rounds_its_exact_value(values, name) -> None:
    dense = Dense(np.array(values))
    (out,) = run_function(one_op(graph_ir.Constant(dense, name), []), [])
    assert same(out, ref_round(np.array(values, dtype=np.float64), name))


def test_integers_are_exact_then_saturated() -> None:
    a = np.array([100, -100, 7, -7, 127, -128], dtype=np.int8)
    b = np.array([100, 100, 2, 2, 1, -1], dtype=np.int8)
    e = ["int8", "int8"]
    assert run1(graph_ir.Add(), a, b, elements=e).tolist() == [127, 0, 9, -5, 127, -128]
    assert run1(graph_ir.Mul(), a, b, elements=e).tolist() == [127, -128, 14, -14, 127, 127]
    assert run1(graph_ir.Div(), a, b, elements=e).tolist() == [1, -1, 3, -3, 127, 127]
    c = np.array([100, 99, 2, 3, 0, 1], dtype=np.int8)
    assert run1(graph_ir.Pow(), b, c, elements=e).tolist() == [127, 127, 4, 8, 1, -1]
    assert run1(graph_ir.Pow(), -b, c, elements=e).tolist() == [127, -128, 4, -8, 1, 1]
    with pytest.raises(InterpretError, match="negative exponent"):
        run1(graph_ir.Pow(), b, b, elements=e)
    assert run1(graph_ir.Neg(), a, elements=["int8"]).tolist() == [-100, 100, -7, 7, -127, 127]
    big = np.array([2**62, -(2**62)], dtype=np.int64)
    assert run1(graph_ir.Add(), big, big, elements=["int64"] * 2).tolist() == [2**63 - 1, -(2**63)]


def test_integer_division_by_zero_is_an_error() -> None:
    a = np.array([1, 2], dtype=np.int32)
    with pytest.raises(InterpretError, match="division by zero"):
        run1(graph_ir.Div(), a, np.array([1, 0], dtype=np.int32), elements=["int32"] * 2)


def test_float_division_by_zero_is_ieee() -> None:
    out = run1(graph_ir.Div(), np.array([1.0, -1.0, 0.0], np.float32), np.zeros(3, np.float32))
    assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2])
    assert np.isnan(run1(graph_ir.Sqrt(), np.array([-1.0], np.float32)))[0]


def test_complex_ops() -> None:
    z = np.array([3 + 4j, -1 - 2j], dtype=np.complex64)
    assert run1(graph_ir.Abs(), z, elements=["c64"]).tolist() == [5.0, np.float32(5**0.5)]
    assert run1(graph_ir.Real(), z, elements=["c64"]).tolist() == [3.0, -1.0]
    assert run1(graph_ir.Imag(), z, elements=["c64"]).tolist() == [4.0, -2.0]
    assert run1(graph_ir.Conj(), z, elements=["c64"]).tolist() == [3 - 4j, -1 + 2j]
    with pytest.raises(InterpretError, match="not ordered"):
        run1(graph_ir.Gt(), z, z, elements=["c64", "c64"])


def test_bool_arithmetic_is_refused() -> None:
    x = np.array([True, False])
    with pytest.raises(InterpretError, match="bool"):
        run1(graph_ir.Add(), x, x, elements=["bool", "bool"])
    assert run1(graph_ir.Maximum(), x, ~x, elements=["bool", "bool"]).tolist() == [True, True]
