"""Mistakes at a kernel launch: each is a TesseraError subclass raised before anything
runs, whose message names this file and line and says what to do, and the caller's
arrays are unchanged afterwards."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.errors import ArgumentError, DTypeError, TesseraError
from tessera.frontend.kernel import args as kernel_args
from tessera.frontend.kernel.args import MAX_PROGRAMS

N = 8


@ts.kernel
def axpy(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32], alpha: ts.f32):
    i = ts.tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]


@ts.kernel
def shift_add(x: ts.Tensor["n", ts.int32], k: ts.int32):
    i = ts.tile.linear_id()
    if i < n:
        x[i] = x[i] + k


@ts.kernel.autotune(space=dict(BLOCK_M=[2, 4]))
def tuned_copy(x: ts.Tensor["M", ts.f32], y: ts.Tensor["M", ts.f32]):
    y[tile_m:tile_m + BM] = x[tile_m:tile_m + BM]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _arrays() -> dict[str, np.ndarray]:
    return {"x": np.arange(N, dtype=np.float32), "y": np.ones(N, np.float32),
            "x64": np.linspace(0.1, 0.9, N), "ro32": _frozen(np.ones(N, np.float32)),
            "ro64": _frozen(np.ones(N, np.float64)), "xi": np.arange(N, dtype=np.int32)}


#: (id, the call on the arrays of _arrays(), the error type, words its message says)
BAD: list[tuple[str, Callable[[dict[str, Any]], Any], type[TesseraError], str]] = [
    ("grid float", lambda a: axpy(a["x"], a["y"], 2.0, grid=2.5), ArgumentError, "grid 2.5"),
    ("grid float axis", lambda a: axpy[(2, 2.5)](a["x"], a["y"], 2.0), ArgumentError,
     "grid (2, 2.5)"),
    ("grid bool", lambda a: axpy(a["x"], a["y"], 2.0, grid=True), ArgumentError, "grid True"),
    ("grid str", lambda a: axpy(a["x"], a["y"], 2.0, grid="4"), ArgumentError, "grid '4'"),
    ("grid 4 axes", lambda a: axpy(a["x"], a["y"], 2.0, grid=(1, 1, 1, 1)), ArgumentError,
     "1 to 3"),
    ("group_size float", lambda a: axpy(a["x"], a["y"], 2.0, group_size=2.0), ArgumentError,
     "group_size"),
    ("group_size 0", lambda a: axpy(a["x"], a["y"], 2.0, group_size=0), ArgumentError,
     "group_size"),
    ("tile_shape float", lambda a: axpy(a["x"], a["y"], 2.0, tile_shape=2.5), ArgumentError,
     "tile_shape"),
    ("config str", lambda a: axpy(a["x"], a["y"], 2.0, config={"BLOCK_M": "x"}),
     ArgumentError, "BLOCK_M"),
    ("schedule", lambda a: axpy(a["x"], a["y"], 2.0, schedule="parallel"), ArgumentError,
     "schedule"),
    ("mode", lambda a: axpy(a["x"], a["y"], 2.0, mode="exact"), ArgumentError, "mode"),
    ("str scalar", lambda a: axpy(a["x"], a["y"], "2.0"), ArgumentError, "got str '2.0'"),
    ("None scalar", lambda a: axpy(a["x"], a["y"], None), ArgumentError, "alpha"),
    ("array scalar", lambda a: axpy(a["x"], a["y"], np.ones(3)), ArgumentError,
     "array of shape (3,)"),
    ("complex scalar", lambda a: axpy(a["x"], a["y"], 2 + 1j), DTypeError, "imaginary"),
    ("complex numpy scalar", lambda a: axpy(a["x"], a["y"], np.complex64(1 - 2j)),
     DTypeError, "imaginary"),
    ("f32 overflow", lambda a: axpy(a["x"], a["y"], 1e300), DTypeError, "largest finite"),
    ("huge int to f32", lambda a: axpy(a["x"], a["y"], 10**400), DTypeError,
     "largest finite"),
    ("fraction to int32", lambda a: shift_add(a["xi"], 2.5), DTypeError, "whole number"),
    ("int32 overflow", lambda a: shift_add(a["xi"], 2**40), DTypeError, "outside"),
    ("nan to int32", lambda a: shift_add(a["xi"], math.nan), DTypeError, "whole number"),
    ("grid over CUDA x", lambda a: axpy(a["x"], a["y"], 2.0, grid=10**12), ArgumentError,
     "at most 2147483647"),
    ("grid over CUDA y", lambda a: axpy[(1, 70000)](a["x"], a["y"], 2.0), ArgumentError,
     "at most 65535"),
    ("group over a block", lambda a: axpy(a["x"], a["y"], 2.0, grid=1, group_size=10**9),
     ArgumentError, "1024 threads"),
    ("programs over budget", lambda a: axpy(a["x"], a["y"], 2.0, grid=10**8), ArgumentError,
     "at most 16,777,216"),
    ("read-only output", lambda a: axpy(a["x"], a["ro32"], 2.0), ArgumentError, "read-only"),
    ("read-only output to convert", lambda a: axpy(a["x"], a["ro64"], 2.0), ArgumentError,
     "converted from float64"),
    ("autotuned read-only output", lambda a: tuned_copy(a["x"], a["ro32"]), ArgumentError,
     "read-only"),
]


@pytest.mark.parametrize("call,kind,words", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_launches_raise_at_the_callers_line(call: Callable[[dict[str, Any]], Any],
                                                 kind: type[TesseraError], words: str) -> None:
    arrays = _arrays()
    before = {k: v.copy() for k, v in arrays.items()}
    with pytest.raises(kind) as info:
        call(arrays)
    err = info.value
    assert type(err) is kind  # not a subclass standing in for another mistake
    assert Path(err.loc.file).resolve() == Path(__file__).resolve() and err.loc.line > 0
    text = str(err)
    assert text.startswith(f"{err.loc}: ") and words in text
    assert err.hint  # says what to do
    for k, v in arrays.items():
        assert v.dtype == before[k].dtype and np.array_equal(v, before[k]), k


def test_the_program_budget_is_checked_from_sizes_before_allocating() -> None:
    # a batch of 4 with grid 2**22 is 2**24 programs: at the budget, not over it
    x = np.zeros(4, np.float32)
    with pytest.raises(ArgumentError, match="16,777,217"):
        axpy(x, x.copy(), 1.0, grid=(2**24 + 1,))
    assert MAX_PROGRAMS == 2**24
    kernel_args.check_size("k", (2**22,), 1, 4)  # exactly the budget is allowed
    with pytest.raises(ArgumentError, match="batch 4"):
        kernel_args.check_size("k", (2**22,), 2, 4)


def test_a_scalar_checked_on_a_remembered_signature_too() -> None:
    x, y = np.arange(N, dtype=np.float32), np.zeros(N, np.float32)
    axpy(x, y, 1.0)
    axpy(x, y, 1.0)  # the call memo's path
    before = y.copy()
    with pytest.raises(DTypeError) as info:
        axpy(x, y, 1e39)
    assert Path(info.value.loc.file).resolve() == Path(__file__).resolve()
    assert np.array_equal(y, before)


def test_converted_inputs_are_not_written_back() -> None:
    """A float64 input the kernel only reads is converted for the launch; it keeps its
    own values (it used to be overwritten with its float32 rounding) and may be
    read-only. A written float64 output gets the result."""
    x = _frozen(np.array([0.1, 1 / 3, 1e-10, 2.0]))
    x_bits = x.copy()
    y = np.array([1.0, 2.0, 3.0, 4.0])
    axpy(x, y, 3.0)
    assert np.array_equal(x, x_bits)
    f32 = np.float32
    ref = (f32(3.0) * x.astype(f32) + np.array([1, 2, 3, 4], f32)).astype(np.float64)
    assert np.array_equal(y, ref)


def test_real_numbers_of_every_kind_are_accepted() -> None:
    x, y = np.arange(N, dtype=np.float32), np.zeros(N, np.float32)
    for alpha in (2, 2.0, True, np.float16(2), np.int8(2), np.array(2.0), 2 + 0j,
                  ml_dtypes.bfloat16(2), np.float64(2)):
        y[:] = 0
        axpy(x, y, alpha)
        assert np.array_equal(y, float(alpha.real if isinstance(alpha, complex) else alpha)
                              * x), alpha
    xi = np.arange(N, dtype=np.int32)
    shift_add(xi, 3.0)  # a whole float is a whole number
    assert np.array_equal(xi, np.arange(N) + 3)
    shift_add(xi, np.int64(-3))  # an int64 scalar in int32's range
    assert np.array_equal(xi, np.arange(N))


F32_OVERFLOW = float(np.float32(3.4028235e38)) + 2.0**103  # half an ulp above the max


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=True, width=64))
def test_f32_scalars_round_once_or_are_refused(alpha: float) -> None:
    x = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    y = np.zeros(4, np.float32)
    if math.isfinite(alpha) and abs(alpha) >= F32_OVERFLOW:
        with pytest.raises(DTypeError):
            axpy(x, y, alpha)
        assert not y.any()
        return
    with np.errstate(over="ignore", invalid="ignore"):
        a32 = np.float32(alpha)  # the one RNE rounding of the scalar
        ref = a32 * x + np.float32(0)
    axpy(x, y, alpha)
    assert np.array_equal(y, ref, equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(st.integers(-(2**40), 2**40))
def test_int32_scalars_are_exact_or_refused(k: int) -> None:
    xi = np.zeros(N, np.int32)
    if not -(2**31) <= k < 2**31:
        with pytest.raises(DTypeError):
            shift_add(xi, k)
        assert not xi.any()
        return
    shift_add(xi, k)
    assert np.array_equal(xi.astype(np.int64), np.full(N, k))


@ts.kernel
def store_scalar(out: ts.Tensor["n", ts.bf16], s: ts.bf16):
    out[0] = s


def test_narrow_scalars_round_once() -> None:
    """A float64 just above a bf16 midpoint rounds up; a cast through float32 would
    land on the midpoint and round to even (down)."""
    value = 1 + 2.0**-8 + 2.0**-30
    out = np.zeros(1, ml_dtypes.bfloat16)
    store_scalar(out, value)
    assert float(out[0]) == 1 + 2.0**-7
    assert float(np.float32(value).astype(ml_dtypes.bfloat16)) == 1.0  # the double rounding
    with pytest.raises(DTypeError, match="largest finite"):
        store_scalar(out, 1e39)
