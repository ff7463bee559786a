"""A complex value never becomes a real one by losing its imaginary part: where NumPy
warns (ComplexWarning) and keeps the real part, tessera raises DTypeError at the user's
line, in the conversion helpers and where a jit annotation asks for a real element."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import numerics
from tessera.numerics.formats.convert import cast_exact

HERE = os.path.basename(__file__)
REAL = ["f64", "f32", "tf32", "bf16", "f16", "fp8_e4m3", "fp6_e2m3", "fp4_e2m1", "e8m0",
        "int8", "int32"]

HELPERS: dict[str, Callable[[np.ndarray, Any], Any]] = {
    "convert": lambda z, to: numerics.convert(z, to),
    "cast_exact": lambda z, to: cast_exact(z, ts.dtype(to)),
    "to_e8m0": lambda z, to: numerics.to_e8m0(z),
    "stochastic_round_array": lambda z, to: numerics.stochastic_round_array(
        z, "bf16" if ts.dtype(to).name in ("e8m0", "tf32") else to, seed=1),
    "round_verified": lambda z, to: numerics.round_verified(z, np.zeros(z.shape), "f32",
                                                     lambda i: np.zeros(len(i))),
    "round_fraction": lambda z, to: numerics.round_fraction(complex(z.flat[0]), "f32"),
    "as_tensor": lambda z, to: ts.as_tensor(z, to),
}

COMPLEX = st.builds(complex, st.floats(-1e3, 1e3), st.floats(-1e3, 1e3).filter(bool))


@settings(max_examples=30, deadline=None)
@given(z=COMPLEX, to=st.sampled_from(REAL), helper=st.sampled_from(sorted(HELPERS)))
def test_helpers_refuse_complex_values(z: complex, to: str, helper: str) -> None:
    arr = np.array([z, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a ComplexWarning would mean the part was dropped
        with pytest.raises(ts.DTypeError) as info:
            HELPERS[helper](arr, to)
    assert "complex" in str(info.value) and HERE in str(info.value)


def test_a_complex_scalar_for_a_real_annotation_is_refused() -> None:
    @ts.jit
    def scale(x: ts.Tensor["N", ts.f32], alpha: ts.f32) -> Any:
        return x * alpha

    x = np.ones(3, np.float32)
    for alpha in (1 + 2j, np.complex64(1 - 0.5j), 2 + 0j):
        with pytest.raises(ts.DTypeError) as info:
            scale(x, alpha)
        text = str(info.value)
        assert "'alpha' is complex" in text and "f32" in text and HERE in text
    # a real number is converted as before; an unannotated complex stays complex
    assert np.array_equal(np.asarray(scale(x, 2.5)), np.full(3, 2.5))
    out = ts.jit(lambda v, c: v * c)(x, 1 + 2j)
    assert out.element == ts.c64 and np.array_equal(np.asarray(out), np.full(3, 1 + 2j))


def test_float_and_int_of_tensors() -> None:
    assert float(ts.as_tensor(np.float32(2.5))) == 2.5
    assert int(ts.as_tensor(np.array([7], np.int32))) == 7
    for call in (float, int):
        with pytest.raises(ts.DTypeError, match="complex tensor"):
            call(ts.as_tensor(np.complex64(1 + 2j)))
        with pytest.raises(ts.ShapeError, match="one element"):
            call(ts.as_tensor(np.ones(3, np.float32)))
