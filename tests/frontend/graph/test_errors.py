"""Every user mistake raises a TesseraError that names the user's file:line and a fix."""

from __future__ import annotations

import inspect
import os

import numpy as np
import pytest

import tessera as ts

HERE = os.path.basename(__file__)
F32 = np.float32


def line_after() -> int:
    """The line number of the statement that follows the call (inside pytest.raises)."""
    return inspect.currentframe().f_back.f_lineno + 1  # type: ignore[union-attr]


def check(info: pytest.ExceptionInfo, line: int, *words: str) -> None:
    text = str(info.value)
    assert f"{HERE}:{line}" in text, text
    for word in words:
        assert word in text, text
    assert isinstance(info.value, ts.TesseraError)


def test_shape_mismatch_in_matmul() -> None:
    a = np.ones((2, 3), F32)
    with pytest.raises(ts.ShapeError) as info:
        line = line_after()
        ts.matmul(a, a)
    check(info, line, "inner dims", "hint")


def test_shape_mismatch_inside_jit_names_the_line_in_the_function() -> None:
    @ts.jit
    def f(a, b):
        f.line = inspect.currentframe().f_lineno + 1  # type: ignore[attr-defined, union-attr]
        return a + b

    with pytest.raises(ts.ShapeError) as info:
        f(np.ones(3, F32), np.ones(4, F32))
    check(info, f.line, "do not broadcast")  # type: ignore[attr-defined]


def test_unknown_dtype() -> None:
    with pytest.raises(ts.DTypeError) as info:
        line = line_after()
        ts.cast(np.ones(2, F32), "f13")
    check(info, line, "f13")


def test_malformed_policy_chain() -> None:
    with pytest.raises(ts.PolicyError) as info:
        line = line_after()
        ts.bf16 @ 3
    check(info, line, "modifier")
    with pytest.raises(ts.PolicyError) as info:
        line = line_after()
        ts.bf16 @ ts.accum(ts.f32) @ ts.accum(ts.f32)
    check(info, line)


def test_inconsistent_dim_symbols() -> None:
    @ts.jit
    def f(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32]):
        return ts.matmul(A, B)

    with pytest.raises(ts.DimBindingError) as info:
        line = line_after()
        f(np.ones((2, 3), F32), np.ones((4, 5), F32))
    check(info, line, "'K'", "3", "4")


def test_unbound_dim_symbol_in_the_result_annotation() -> None:
    @ts.jit
    def f(x: ts.Tensor["N", ts.f32]) -> ts.Tensor["Q", ts.f32]:
        return x

    with pytest.raises(ts.DimBindingError) as info:
        f(np.ones(3, F32))
    check(info, f.__wrapped__.__code__.co_firstlineno, "Q")  # type: ignore[attr-defined]


def test_rank_mismatch_with_the_annotation() -> None:
    @ts.jit
    def f(x: ts.Tensor["B", "D", ts.f32]):
        return x

    with pytest.raises(ts.DimBindingError) as info:
        line = line_after()
        f(np.ones(3, F32))
    check(info, line, "rank")


def test_grad_of_a_non_scalar() -> None:
    with pytest.raises(ts.GradError) as info:
        line = line_after()
        ts.grad(lambda W: W * 2.0)(np.ones(3, F32))
    check(info, line, "scalar")


def test_tile_api_outside_a_kernel() -> None:
    with pytest.raises(ts.TileContextError) as info:
        line = line_after()
        ts.tile.linear_id()
    check(info, line, "@ts.kernel")


def test_traced_value_in_python_control_flow() -> None:
    @ts.jit
    def f(x):
        f.line = inspect.currentframe().f_lineno + 1  # type: ignore[attr-defined, union-attr]
        if ts.sum(x) > 0:
            return x
        return -x

    with pytest.raises(ts.TraceError) as info:
        f(np.ones(2, F32))
    check(info, f.line, "ts.where")  # type: ignore[attr-defined]


def test_wrong_number_of_arguments() -> None:
    f = ts.jit(lambda x, y: x + y)
    with pytest.raises(ts.ArgumentError) as info:
        line = line_after()
        f(np.ones(2, F32))
    check(info, line, "missing")


def test_unhashable_static_argument() -> None:
    f = ts.jit(lambda x, opts: x)
    with pytest.raises(ts.ArgumentError) as info:
        line = line_after()
        f(np.ones(2, F32), {1, 2})
    check(info, line, "hashable")


def test_bad_axis() -> None:
    with pytest.raises(ts.ShapeError) as info:
        line = line_after()
        ts.sum(np.ones((2, 2), F32), axis=3)
    check(info, line, "axis 3")


def test_bad_reshape() -> None:
    with pytest.raises(ts.ShapeError) as info:
        line = line_after()
        ts.reshape(np.ones(6, F32), (4, -1))
    check(info, line, "reshape")


def test_unknown_stage() -> None:
    f = ts.jit(lambda x: x)
    with pytest.raises(ts.StageError) as info:
        line = line_after()
        ts.inspect_ir(f, "ptx", np.ones(2, F32))
    check(info, line, "stages")


def test_inspect_before_any_call_without_annotations() -> None:
    f = ts.jit(lambda x: x)
    with pytest.raises(ts.StageError) as info:
        line = line_after()
        ts.inspect_ir(f, "graph")
    check(info, line, "example arguments")


def test_where_needs_a_boolean_condition() -> None:
    with pytest.raises(ts.DTypeError) as info:
        line = line_after()
        ts.where(np.ones(2, F32), 1.0, 0.0)
    check(info, line, "boolean")


def test_unsupported_indexing() -> None:
    line = line_after()
    f = ts.jit(lambda x: x[np.array([0, 1])])
    with pytest.raises(ts.UnsupportedError) as info:
        f(np.ones(3, F32))
    check(info, line, "basic indexing")


def test_tracebacks_start_at_the_users_call() -> None:
    """Public entry points drop tessera's internal frames from the traceback."""
    f = ts.jit(lambda x: ts.matmul(x, x))
    with pytest.raises(ts.ShapeError) as info:
        f(np.ones((2, 3), F32))
    frames = [tb.path for tb in info.traceback]
    assert not any("/tessera/frontend/" in str(p) for p in frames), frames
