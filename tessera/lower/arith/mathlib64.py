"""Target IR for the specified binary64 ``exp``: the f64 ``tile.exp`` of checked mode.

:func:`emit_exp_f64_specified` is
:func:`tessera.numerics.transcendental.exp64.exp_f64_specified`, op for op: the clamp as
two ``setp`` + ``selp`` (a NaN takes the upper clamp value; PTX ``min``/``max`` would
drop it), ``cvt.rni.s32.f64`` and ``cvt.rn.f64.s32``, the Cody-Waite reduction and the
Horner polynomial in ``mul.rn.f64`` / ``sub.rn.f64`` / ``add.rn.f64`` (the explicit
rounding mode keeps ``ptxas`` from contracting them into ``fma``), 2^(n-1) assembled
from its bit pattern with ``mul.lo.s32`` + ``mov.b64 {lo, hi}``, two ``mul.rn.f64``,
then the domain selects: +0 where ``x < -104`` and the input NaN quieted (``or.b32`` of
the quiet bit on the high word) where ``x`` is NaN.

The steps before the scaling are those of :func:`tessera.lower.arith.mathlib.emit_exp_f32`
(the same constants from :mod:`tessera.numerics.transcendental.exp`); they are written
out here rather than shared so that each function's instruction sequence stays the
documented one of its own algorithm.
"""

from __future__ import annotations

from tessera.errors import IRVerifyError
from tessera.ir.core import Value
from tessera.ir.dialects.target import RegType
from tessera.lower.arith.mathlib import emit_reduce_and_approximate
from tessera.lower.emit import TargetEmitter
from tessera.numerics.transcendental import exp as tr
from tessera.numerics.transcendental import exp64


def emit_exp_f64_specified(e: TargetEmitter, x: Value) -> Value:
    """e^x of an f64 register by the algorithm of
    :mod:`tessera.numerics.transcendental.exp64`. Returns the f64 result register."""
    if x.type != RegType("f64"):
        raise IRVerifyError(f"emit_exp_f64_specified takes reg<f64> values, got {x.type}",
                            hint="convert to f64 first (cvt)")
    f64 = "f64"
    hi, lo = e.const(exp64.CLAMP_HI_F64, f64), e.const(tr.CLAMP_LO, f64)
    xc = e.selp(x, hi, e.setp("lt", x, hi, f64), f64)  # a NaN takes the clamp value
    xc = e.selp(xc, lo, e.setp("gt", xc, lo, f64), f64)
    n, p = emit_reduce_and_approximate(e, xc)  # steps 3-5, as the f32 exp
    # 2^(n-1): high word (n + 1022) << 20 (as a multiply: shl wants b32), low word 0
    biased = e.add(n, e.const(1022, "s32"), "s32")
    high = e.mul(biased, e.const(1 << 20, "s32"), "s32")
    scale = e.pack([e.const(0, "s32"), high], f64)
    v = e.mul(e.mul(p, scale, f64), e.const(2.0, f64), f64)  # exact, or +inf
    v = e.selp(e.const(0.0, f64), v, e.setp("lt", x, lo, f64), f64)  # below e^-104: +0
    return emit_quiet_nan_f64(e, x, v)


def emit_quiet_nan_f64(e: TargetEmitter, x: Value, v: Value) -> Value:
    """``v``, or where the f64 register ``x`` is NaN, that NaN quieted (payload kept: the
    quiet bit is bit 19 of the high word)."""
    x_lo, x_hi = e.unpack(x, "b32", 2)
    quiet_hi = e.bin("or", x_hi, e.const(exp64.QUIET_BIT_F64 >> 32, "b32"), "b32")
    quiet = e.pack([x_lo, quiet_hi], "f64")
    return e.selp(quiet, v, e.setp("nan", x, x, "f64"), "f64")


def emit_max_nan_f64(e: TargetEmitter, a: Value, b: Value) -> Value:
    """``max(a, b)`` of f64 registers with NaN propagating, as ``np.max`` does (PTX
    ``max.f64`` has no ``.NaN`` modifier and returns the other operand): a NaN operand
    gives ``a + b``, a NaN. Which zero a tie of +0 and -0 gives is unspecified."""
    either_nan = e.setp("nan", a, b, "f64")
    return e.selp(e.add(a, b, "f64"), e.bin("max", a, b, "f64"), either_nan, "f64")


def emit_min_nan_f64(e: TargetEmitter, a: Value, b: Value) -> Value:
    """``min(a, b)`` of f64 registers with NaN propagating, as ``np.minimum`` does (a NaN
    operand gives ``a + b``, a NaN)."""
    either_nan = e.setp("nan", a, b, "f64")
    return e.selp(e.add(a, b, "f64"), e.bin("min", a, b, "f64"), either_nan, "f64")


def emit_shfl_max_f64(e: TargetEmitter, v: Value, offsets: list[int]) -> Value:
    """The NaN-propagating f64 max over lanes ``lane ^ offset`` for each offset (its two
    b32 halves exchanged with ``shfl.sync.bfly``); every lane of the warp must run it."""
    from tessera.ir.dialects.target.ops import Shfl

    for off in offsets:
        o = e.const(off, "u32")
        lo, hi = e.unpack(v, "b32", 2)
        other = e.pack([e.one(Shfl("bfly"), lo, o), e.one(Shfl("bfly"), hi, o)], "f64")
        v = emit_max_nan_f64(e, v, other)
    return v


__all__ = ["emit_exp_f64_specified", "emit_max_nan_f64", "emit_min_nan_f64",
           "emit_quiet_nan_f64", "emit_shfl_max_f64"]
