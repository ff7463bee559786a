"""A tile kernel called inside a traced function is a ``graph.kernel_call``
(tests/frontend/graph/test_kernel_call.py); differentiating through one without a
``custom_vjp`` is a clear GradError at the user's line, never an error about the
tracer's type."""

from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np
import pytest

import tessera as ts

HERE = os.path.basename(__file__)


@ts.kernel
def double(x: ts.Tensor["n", ts.f32]):
    i = ts.tile.linear_id()
    if i < n:  # n is bound from the shape of x
        x[i] = x[i] * 2.0
    return x


def _line_of(fn: Any, text: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


def test_kernel_inside_jit_runs_and_grad_names_the_call_line() -> None:
    def f(a: Any) -> Any:
        return double(a) + 1.0

    out = ts.jit(lambda a: ts.sum(f(a)))(np.ones(4, np.float32))
    assert np.array_equal(np.asarray(out), np.float32(12.0))
    with pytest.raises(ts.GradError) as info:
        ts.grad(lambda a: ts.sum(f(a)))(np.ones(4, np.float32))
    text = str(info.value)
    assert f"{HERE}:{_line_of(f, 'double(a)')}" in text, text
    assert "tile kernel 'double' has no differentiation rule" in text
    assert "ts.custom_vjp" in text and "Tracer" not in text


def test_kernel_on_a_concrete_array_inside_jit_leaves_it_alone() -> None:
    """A graph op, run on a copy on every call (not once at trace time)."""
    data = np.ones(4, np.float32)

    @ts.jit
    def f(a: Any) -> Any:
        return double(data) + a

    for k in range(2):
        assert np.array_equal(np.asarray(f(np.full(4, k, np.float32))), np.full(4, 2.0 + k))
    assert np.array_equal(data, np.ones(4))  # written on a copy only


def test_kernel_still_runs_outside_jit() -> None:
    x = np.arange(5, dtype=np.float32)
    assert np.array_equal(np.asarray(double(x)), np.arange(5) * 2.0)


def test_numpy_conversion_of_a_tracer_is_a_trace_error_at_the_users_line() -> None:
    def f(a: Any) -> Any:
        return np.asarray(a)

    with pytest.raises(ts.TraceError) as info:
        ts.jit(f)(np.ones(3, np.float32))
    assert f"{HERE}:{_line_of(f, 'np.asarray')}" in str(info.value)
