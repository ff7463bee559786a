"""The compiled exp loop (tessera.numerics.transcendental.exp_native) is the specified
algorithm op for op: its binary64 value before the final rounding equals NumPy's
evaluation of the same steps bit for bit, and LLVM is given nothing that would let it
fuse or reorder them."""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest

from tessera.numerics.transcendental import exp_native
from tessera.numerics.transcendental.exp import exp_f32_specified, exp_f32_unrounded


def _kernels() -> None:
    if exp_native.native_exp() is None:
        pytest.skip(f"no compiled exp here: {exp_native.UNAVAILABLE}")


def _inputs() -> np.ndarray:
    rng = np.random.default_rng(11)
    return np.concatenate([
        (rng.standard_normal(1 << 18) * 30).astype(np.float32),
        rng.uniform(-110, 90, 1 << 16).astype(np.float32),
        np.array([0.0, -0.0, np.inf, -np.inf, 88.72284, -87.34, -103.97, 89.0, -104.0,
                  1e30, -1e30, 1e-45, -1e-45], np.float32)])


def test_the_unrounded_value_is_the_algorithms() -> None:
    """Every add, multiply and rounding of steps 2-6 as NumPy performs them: a fused or
    reordered operation would change the binary64 bits."""
    _kernels()
    x = _inputs()
    wide = np.empty(x.size, np.float64)
    exp_native.native_exp_wide()(x, wide)  # type: ignore[misc]
    assert np.array_equal(wide.view(np.uint64), exp_f32_unrounded(x).view(np.uint64))


def test_the_result_is_the_specified_one_nan_included() -> None:
    _kernels()
    codes = np.array([0x7FC00001, 0xFF800123, 0x7F800001, 0x7FBFFFFF], np.uint32)
    x = np.concatenate([_inputs(), codes.view(np.float32)])
    out = np.empty_like(x)
    exp_native.native_exp()(x, out)  # type: ignore[misc]
    assert np.array_equal(out.view(np.uint32), exp_f32_specified(x).view(np.uint32))


def test_the_ir_allows_no_contraction_or_reassociation() -> None:
    text = exp_native._ir("exp_f32", False)
    assert not re.search(r"\b(fast|contract|reassoc|nnan|ninf|nsz|arcp|afn)\b", text)
    assert "llvm.fma" not in text and "fmuladd" not in text
    assert text.count("fmul double") == 16 and text.count("fadd double") == 13


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
def test_the_machine_code_has_no_fused_multiply_add() -> None:
    """Optimised and vectorised for this CPU (FMA units included), the loop still
    multiplies and adds separately."""
    _kernels()
    module, tm = exp_native.optimized(("exp_f32", False))
    assembly = tm.emit_assembly(module)  # type: ignore[attr-defined]
    # the loop is there, rounding to even (AVX-512 targets round with vrndscale)
    assert re.search(r"v?round[sp]d|vrndscale[sp]d", assembly)
    assert not re.search(r"vf(n)?m(add|sub)", assembly)


def test_the_switch_turns_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESSERA_NATIVE_EXP", "0")
    assert exp_native.native_exp() is None


def test_without_llvmlite_exp_falls_back_with_the_same_bits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed build (llvmlite missing, no native target) is remembered with its reason
    and exp_f32 runs the NumPy evaluation instead."""
    from tessera.numerics.transcendental.exp import exp_f32

    def broken() -> None:
        raise ModuleNotFoundError("No module named 'llvmlite'")

    monkeypatch.setattr(exp_native, "_kernels", None)
    monkeypatch.setattr(exp_native, "UNAVAILABLE", "")
    monkeypatch.setattr(exp_native, "_build", broken)
    x = _inputs()
    assert exp_native.native_exp() is None
    assert "llvmlite" in exp_native.UNAVAILABLE
    assert np.array_equal(exp_f32(x).view(np.uint32), exp_f32_specified(x).view(np.uint32))
