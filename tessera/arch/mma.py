"""Numerics of one ``mma.sync`` / ``wgmma.mma_async`` step under the golden convention.

The interpreter's "wide" accumulation convention: every product of two input elements is
exact in float64 (at most 11 x 11 significand bits), the K products of one instruction
are summed in float64 in ascending k, and that sum is added to the float64 accumulator:

    D = C + (((a[:,0]*b[0,:] + a[:,1]*b[1,:]) + a[:,2]*b[2,:]) + ...)

This defines the meaning of a kernel; real tensor cores sum in a different, partly
unspecified order and precision, which is a tolerance question for hardware tests.

Formats: ``bf16``, ``f16`` (K = 16 per instruction), ``e4m3``, ``e5m2`` (K = 32; sm_89+
for mma.sync, sm_90a for wgmma), ``tf32`` (K = 8; 32-bit patterns whose low 13
significand bits are zero: the tensor cores' use of other bits is not modelled, and
:func:`tf32_unrounded` finds them), and the integers ``s8``, ``u8`` (K = 32), whose
products and sums are exact in float64 and whose ``s32`` accumulator keeps the low 32
bits of the exact sum (:func:`to_s32`).  Inputs are bit patterns (uint16 / uint8) or arrays of
the format's own NumPy / ml_dtypes type.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from tessera.arch.fragments import (
    from_fragments,
    mma_m16n8_c,
    mma_m16n8k8_a,
    mma_m16n8k8_b,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
    to_fragments,
    unpack_registers,
)
from tessera.errors import ArgumentError, DTypeError, ShapeError

FORMATS: dict[str, tuple[type, int, int]] = {
    "bf16": (ml_dtypes.bfloat16, 16, 16),
    "f16": (np.float16, 16, 16),
    "e4m3": (ml_dtypes.float8_e4m3fn, 8, 32),
    "e5m2": (ml_dtypes.float8_e5m2, 8, 32),
    "tf32": (np.float32, 32, 8),
    "s8": (np.int8, 8, 32),
    "u8": (np.uint8, 8, 32),
}
"""Format name -> (NumPy type, element bits, K of one instruction)."""

#: integer formats: their products and sums are exact integers (the accumulator is s32)
INTEGER = ("s8", "u8")

_ALIASES = {"bfloat16": "bf16", "float16": "f16", "fp16": "f16", "fp8_e4m3": "e4m3",
            "float8_e4m3fn": "e4m3", "fp8_e5m2": "e5m2", "float8_e5m2": "e5m2",
            "int8": "s8", "uint8": "u8", "tensorfloat32": "tf32"}


def _format(name: str) -> str:
    key = _ALIASES.get(name, name)
    if key not in FORMATS:
        raise DTypeError(f"tensor-core input format {name!r} is not one of {sorted(FORMATS)}",
                         hint="use bf16, f16, tf32, e4m3, e5m2, s8 or u8")
    return key


def instruction_k(fmt: str) -> int:
    """K of one mma.sync / wgmma instruction for ``fmt``: 16 for 16-bit, 32 for 8-bit."""
    return FORMATS[_format(fmt)][2]


def decode_elements(values: np.ndarray, fmt: str) -> np.ndarray:
    """Float64 values of ``values`` given as bit patterns or in the format's own type."""
    np_type, bits, _ = FORMATS[_format(fmt)]
    v = np.asarray(values)
    if v.dtype == np.dtype(np_type):
        return v.astype(np.float64)
    if v.dtype.kind == "u" and v.dtype.itemsize * 8 == bits:
        return v.view(np_type).astype(np.float64)
    raise ArgumentError(f"{fmt} operands must be uint{bits} bit patterns or {np_type.__name__}, "
                        f"got {v.dtype}", hint="convert with ml_dtypes first; no silent rounding")


def mma(a: np.ndarray, b: np.ndarray, c: np.ndarray, fmt: str,
        fmt_b: str | None = None) -> np.ndarray:
    """``D = C + A @ B`` for one instruction: A (..., M, K), B (..., K, N), C (..., M, N).

    K must equal the instruction K of the formats; C is converted to float64 and D is
    float64.  Batch axes broadcast, so one call runs every warp or CTA of a launch.
    """
    fa, fb = _format(fmt), _format(fmt_b or fmt)
    if FORMATS[fa][2] != FORMATS[fb][2]:
        raise DTypeError(f"A format {fa} and B format {fb} have different instruction K")
    av, bv = decode_elements(a, fa), decode_elements(b, fb)
    k = FORMATS[fa][2]
    if av.shape[-1] != k or bv.shape[-2] != k:
        raise ShapeError(f"one {fa} instruction has K = {k}; got A {av.shape}, B {bv.shape}")
    acc = av[..., :, 0, None] * bv[..., 0, None, :]
    for kk in range(1, k):  # ascending k, one rounding per float64 add
        acc = acc + av[..., :, kk, None] * bv[..., kk, None, :]
    return np.asarray(c, np.float64) + acc


def tf32_unrounded(bits: np.ndarray) -> np.ndarray:
    """Where 32-bit ``.tf32`` operand patterns are not tf32 values (any of the 13 low
    significand bits set; ``cvt.rna.tf32.f32`` clears them), which the interpreter
    refuses rather than guess what the tensor cores make of those bits."""
    return (np.asarray(bits).view(np.uint32) & np.uint32(0x1FFF)) != 0


def to_s32(d: np.ndarray, satfinite: bool = False) -> np.ndarray:
    """An integer product's exact D (float64, every value an integer below 2^53 in
    magnitude) as the ``s32`` accumulator holds it: the low 32 bits (two's-complement
    wrap-around, as ``add.s32``), or clamped to ``[-2^31, 2^31 - 1]`` with
    ``.satfinite`` (PTX ISA sec. 9.7.14.5.14). Kernels that need one of the two rules
    to hold bound their sums below 2^31 instead (:mod:`tessera.lower.sm80.gemm`)."""
    wide = np.asarray(d, np.float64).astype(np.int64)
    if satfinite:
        return np.clip(wide, -2**31, 2**31 - 1).astype(np.int32)
    return wide.astype(np.int32)  # NumPy's int64 -> int32 keeps the low 32 bits


def mma_sync_fragments(a_regs: np.ndarray, b_regs: np.ndarray, c: np.ndarray,
                       fmt: str) -> np.ndarray:
    """``mma.sync.aligned.m16n8k{8,16,32}.row.col.f32`` on per-lane registers.

    ``a_regs`` (..., 32, 4) and ``b_regs`` (..., 32, 2) are uint32 registers in the ISA's
    fragment layouts; ``c`` (..., 32, 4) holds the float64 accumulators.  Returns D in the
    same (..., 32, 4) layout, float64.
    """
    key = _format(fmt)
    bits = FORMATS[key][1]
    la, lb = {16: (mma_m16n8k16_a(), mma_m16n8k16_b()), 32: (mma_m16n8k8_a(),
              mma_m16n8k8_b())}.get(bits, (mma_m16n8k32_a(), mma_m16n8k32_b()))
    lc = mma_m16n8_c()
    a = from_fragments(unpack_registers(a_regs, bits), la)
    b = from_fragments(unpack_registers(b_regs, bits), lb)
    cm = from_fragments(np.asarray(c, np.float64), lc)
    return to_fragments(mma(a, b, cm, key), lc)
