"""Differentiation requests that cannot be honoured raise TesseraErrors at the user's line.

Every check asserts the error class (a TesseraError subclass), this file's name and the
line of the offending statement in the message.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pytest

import tessera as ts

HERE = os.path.basename(__file__)
X = np.array([0.5, -1.0, 2.0])


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def _line_of(marker: str) -> int:
    """The line of this file that carries the comment ``# <marker>``."""
    with open(__file__) as src:
        for k, text in enumerate(src, start=1):
            if text.rstrip().endswith(f"# <{marker}>"):
                return k
    raise AssertionError(f"marker {marker} not found")


def _at(err: pytest.ExceptionInfo[Any], line: int, cls: type[ts.TesseraError]) -> str:
    """Check the class and the ``file:line`` of a raised error; return its message."""
    assert isinstance(err.value, cls) and isinstance(err.value, ts.TesseraError)
    text = str(err.value)
    assert f"{HERE}:{line}" in text, text
    return text


def two(a: Any, b: Any) -> Any:
    return ts.sum(a * b)


def test_grad_of_non_scalar_function() -> None:
    with pytest.raises(ts.GradError) as err:
        line = _line() + 1
        ts.grad(lambda x: x * 2.0)(X)
    assert "scalar" in _at(err, line, ts.GradError)


def test_grad_of_complex_valued_function() -> None:
    with pytest.raises(ts.GradError) as err:
        line = _line() + 1
        ts.grad(lambda z: ts.sum(z))(X + 1j)
    assert "real" in _at(err, line, ts.GradError)


@pytest.mark.parametrize("argnums", [2, -3, (0, 5)])
def test_argnums_out_of_range(argnums: Any) -> None:
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        ts.grad(two, argnums=argnums)(X, X)
    assert "out of range" in _at(err, line, ts.ArgumentError)


def test_wrt_names_a_missing_argument() -> None:
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        ts.grad(two, wrt=["a", "c"])(X, X)
    text = _at(err, line, ts.ArgumentError)
    assert "'c'" in text and "two(a, b)" in text


def test_both_argnums_and_wrt() -> None:
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        ts.value_and_grad(two, argnums=0, wrt="b")(X, X)
    assert "not both" in _at(err, line, ts.ArgumentError)


def test_non_tensor_argument() -> None:
    def loss(x: Any, mode: str) -> Any:
        return ts.sum(x) if mode == "sum" else ts.mean(x)

    with pytest.raises(ts.GradError) as err:
        line = _line() + 1
        ts.grad(loss, wrt="mode")(X, "sum")
    assert "'mode'" in _at(err, line, ts.GradError)


def test_integer_argument() -> None:
    with pytest.raises(ts.GradError) as err:
        line = _line() + 1
        ts.grad(lambda n: ts.sum(ts.cast(n, ts.f32)))(np.arange(3))
    assert "int" in _at(err, line, ts.GradError)


def test_jvp_with_mismatched_primals_and_tangents() -> None:
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        ts.jvp(two, (X, X), (X,))
    assert "2 primals and 1 tangents" in _at(err, line, ts.ArgumentError)
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        ts.jvp(two, (X, X), (X, np.ones(4)))
    assert "(4,)" in _at(err, line, ts.ArgumentError)
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        ts.jvp(lambda p: ts.sum(p["a"] * p["b"]), ({"a": X, "b": X},), ({"a": X},))
    assert "tangent" in _at(err, line, ts.ArgumentError)


def test_pullback_with_wrong_cotangent() -> None:
    _, pullback = ts.vjp(lambda x: ts.sin(x), X)
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        pullback(np.ones(5))
    assert "shape" in _at(err, line, ts.ArgumentError)
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        pullback((X, X))
    assert "1 cotangent" in _at(err, line, ts.ArgumentError)
    # a tuple for a dict output would pair cotangents with outputs by key order
    _, pullback = ts.vjp(lambda x: {"b": ts.sin(x), "a": x}, X)
    with pytest.raises(ts.TesseraError) as err:
        line = _line() + 1
        pullback((X, X * 0.0))
    assert "structure" in _at(err, line, ts.ArgumentError)


def test_traced_value_in_python_if() -> None:
    @ts.jit
    def branchy(x: Any) -> Any:
        if ts.sum(x) > 0:  # <python-if>
            return x * 2.0
        return -x

    with pytest.raises(ts.TraceError) as err:
        branchy(X)
    assert "control flow" in _at(err, _line_of("python-if"), ts.TraceError)
    # the same mistake under grad is reported at the same line
    with pytest.raises(ts.TraceError) as err:
        ts.grad(lambda x: ts.sum(branchy(x)))(X)
    _at(err, _line_of("python-if"), ts.TraceError)


LEAKED: list[Any] = []


def test_traced_value_escaping() -> None:
    @ts.jit
    def leaky(x: Any) -> Any:
        LEAKED.append(x * 2.0)  # stored in a global: escapes the trace
        return ts.sum(x)

    leaky(X)
    with pytest.raises(ts.TraceError) as err:
        line = _line() + 1
        ts.exp(LEAKED[-1])
    assert "after its function finished tracing" in _at(err, line, ts.TraceError)
    # used inside a later trace (a grad) it is an escaped value of a finished trace
    with pytest.raises(ts.TraceError) as err:
        line = _line() + 1
        ts.grad(lambda x: ts.sum(x * LEAKED[-1]))(X)
    assert "escaped" in _at(err, line, ts.TraceError)


def test_integer_valued_function() -> None:
    """An integer loss has no gradient (its derivative is zero almost everywhere)."""
    with pytest.raises(ts.GradError) as err:
        line = _line() + 1
        ts.grad(lambda x: ts.sum(ts.cast(ts.round(x), ts.int32)))(X)
    assert "int32" in _at(err, line, ts.GradError)
