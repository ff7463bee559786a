"""Target IR for the specified binary64 functions written as steps over
:class:`tessera.numerics.transcendental.arith64.Arith`: ``erf`` and ``erfc``
(``tile.erf``, ``tile.erfc``, and so the erf-form GELU), ``tanh`` (``tile.tanh``) and
``log`` (``tile.log`` in checked mode; fast mode keeps ``lg2.approx``).

Each ``emit_*`` function runs the algorithm's own steps (for instance
:func:`tessera.numerics.transcendental.erf64.erf_steps`) on f64 registers through
:class:`TargetArith`, so the instruction sequence is the NumPy one by construction:
``add``/``sub``/``mul``/``div`` with ``.rn`` (an explicit rounding mode, never
contracted into ``fma``), ``setp.lt.f64`` + ``selp.f64`` for the clamps, the interval
choices and the signs, ``neg.f64``/``abs.f64`` (sign bit only), ``mov.b64 {lo, hi}`` to
clear the low word, ``and``/``or``/``xor``/``shr``/``add`` on the high word for the
log's reduction, the specified exp
(:func:`tessera.lower.arith.mathlib64.emit_exp_f64_specified`) and the quieted input NaN.
"""

from __future__ import annotations

import math

from tessera.errors import IRVerifyError
from tessera.ir.core import Value
from tessera.ir.dialects.target import RegType
from tessera.lower.arith.mathlib64 import emit_exp_f64_specified, emit_quiet_nan_f64
from tessera.lower.emit import TargetEmitter
from tessera.numerics.transcendental import erf64, log64, tanh64

F64 = "f64"


class TargetArith:
    """:class:`tessera.numerics.transcendental.arith64.Arith` on f64 registers: each
    operation one instruction (or the specified exp's sequence)."""

    def __init__(self, e: TargetEmitter) -> None:
        self.e = e

    def const(self, c: float) -> Value:
        if math.isnan(c):  # the default quiet NaN, from its bit pattern
            return self.e.pack([self.e.const(0, "b32"), self.e.const(0x7FF80000, "b32")], F64)
        return self.e.const(float(c), F64)

    def add(self, a: Value, b: Value) -> Value:
        return self.e.bin("add", a, b, F64)

    def sub(self, a: Value, b: Value) -> Value:
        return self.e.bin("sub", a, b, F64)

    def mul(self, a: Value, b: Value) -> Value:
        return self.e.bin("mul", a, b, F64)

    def div(self, a: Value, b: Value) -> Value:
        return self.e.bin("div", a, b, F64)

    def neg(self, a: Value) -> Value:
        return self.e.un("neg", a, F64)

    def abs(self, a: Value) -> Value:
        return self.e.un("abs", a, F64)

    def less(self, a: Value, b: Value) -> Value:
        return self.e.setp("lt", a, b, F64)  # false for a NaN, as NumPy's <

    def select(self, p: Value, a: Value, b: Value) -> Value:
        return self.e.selp(a, b, p, F64)

    def exp(self, a: Value) -> Value:
        return emit_exp_f64_specified(self.e, a)

    def high_part(self, a: Value) -> Value:
        _, hi = self.e.unpack(a, "b32", 2)
        return self.e.pack([self.e.const(0, "b32"), hi], F64)

    def exponent_split(self, a: Value) -> tuple[Value, Value]:
        e = self.e
        lo, hi = e.unpack(a, "b32", 2)
        high = e.pack([hi], "u32")

        def u32(op: str, x: Value, c: int) -> Value:
            return e.bin(op, x, e.const(c, "u32"), "u32")

        mant = u32("and", high, 0xFFFFF)
        i = u32("and", u32("add", mant, 0x95F64), 0x100000)
        new_high = e.bin("or", mant, u32("xor", i, 0x3FF00000), "u32")
        m = e.pack([lo, e.pack([new_high], "b32")], F64)
        k = e.bin("add", u32("shr", high, 20), u32("shr", i, 20), "u32")
        k = e.bin("sub", e.pack([k], "s32"), e.const(1023, "s32"), "s32")
        return m, e.cvt(k, F64, "s32", "rn")

    def quiet_nan_of(self, x: Value, v: Value) -> Value:
        return emit_quiet_nan_f64(self.e, x, v)


def _check(x: Value, name: str) -> None:
    if x.type != RegType(F64):
        raise IRVerifyError(f"{name} takes reg<f64> values, got {x.type}",
                            hint="convert to f64 first (cvt)")


def emit_erf_f64_specified(e: TargetEmitter, x: Value) -> Value:
    """erf of an f64 register by :mod:`tessera.numerics.transcendental.erf64`."""
    _check(x, "emit_erf_f64_specified")
    return erf64.erf_steps(TargetArith(e), x)


def emit_erfc_f64_specified(e: TargetEmitter, x: Value) -> Value:
    """erfc of an f64 register by :mod:`tessera.numerics.transcendental.erf64`."""
    _check(x, "emit_erfc_f64_specified")
    return erf64.erfc_steps(TargetArith(e), x)


def emit_tanh_f64_specified(e: TargetEmitter, x: Value) -> Value:
    """tanh of an f64 register by :mod:`tessera.numerics.transcendental.tanh64`."""
    _check(x, "emit_tanh_f64_specified")
    return tanh64.tanh_steps(TargetArith(e), x)


def emit_log_f64_specified(e: TargetEmitter, x: Value) -> Value:
    """log of an f64 register by :mod:`tessera.numerics.transcendental.log64`."""
    _check(x, "emit_log_f64_specified")
    return log64.log_steps(TargetArith(e), x)


#: the Tile IR op name -> its emitter
EMITTERS = {"tile.erf": emit_erf_f64_specified, "tile.erfc": emit_erfc_f64_specified,
            "tile.tanh": emit_tanh_f64_specified, "tile.log": emit_log_f64_specified}

__all__ = ["EMITTERS", "TargetArith", "emit_erf_f64_specified", "emit_erfc_f64_specified",
           "emit_log_f64_specified", "emit_tanh_f64_specified"]
