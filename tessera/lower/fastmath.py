"""Target IR for Tile IR math in fast mode: the hardware's approximate instructions.

A kernel compiled with ``mode="fast"`` trades the checked mode's reproducible bits for
speed (docs/ptx-backend.md, "Fast-math mode"); no float64 instruction is left:

* ``exp(x)`` of f32 is ``mul.rn.f32 t, x, log2(e)`` then ``ex2.approx.ftz.f32 d, t``
  (CUDA's ``__expf``). ``.ftz`` is chosen because the flushed results are below
  2^-126, which no sum they enter can tell from zero at f32 precision relative to the
  values that dominate it (a softmax row's maximum contributes 1), and the subnormal
  form costs extra instructions around the approximation (docs/ptx-backend.md).
* ``log(x)`` is ``lg2.approx.ftz.f32`` then ``mul.rn.f32`` by ln(2).
* ``a / b`` of f32 is ``div.full.f32`` (2 ulp over the full range; ``div.approx`` is
  not accurate for ``|b| > 2^126``).
* a float ``row_sum`` is the checked mode's tree and butterfly shape, in f32.

The error each instruction may add is :data:`tessera.interp.target.approx.BOUNDS`;
:func:`exp_error` composes the ``exp`` sequence's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from tessera.interp.target.approx import BOUNDS
from tessera.ir.core import Value
from tessera.ir.dialects.target.ops import Shfl
from tessera.lower.arith.mathlib import _check, _offsets, _tree
from tessera.lower.emit import TargetEmitter

#: log2(e) and ln(2) rounded to float32 (the immediates of the two multiplies)
LOG2E_F32 = float(np.float32(1 / math.log(2)))
LN2_F32 = float(np.float32(math.log(2)))
#: the largest |x| whose exp has a finite, normal f32 value (e^88.73 > 2^128,
#: e^-87.34 < 2^-126); outside, both modes give inf, or values below 2^-126
EXP_ARG_MAX = 88.73


def emit_exp_fast(e: TargetEmitter, x: Value) -> Value:
    """e^x of an f32 register as ``ex2.approx.ftz.f32(x * log2(e))``."""
    _check(x, "f32", "emit_exp_fast")
    t = e.mul(x, e.const(LOG2E_F32, "f32"), "f32")
    return e.un("ex2", t, "f32", "approx.ftz")


def emit_log_fast(e: TargetEmitter, x: Value) -> Value:
    """ln(x) of an f32 register as ``lg2.approx.ftz.f32(x) * ln(2)``."""
    _check(x, "f32", "emit_log_fast")
    return e.mul(e.un("lg2", x, "f32", "approx.ftz"), e.const(LN2_F32, "f32"), "f32")


def emit_div_fast(e: TargetEmitter, a: Value, b: Value) -> Value:
    """a / b of f32 registers: ``div.full.f32``."""
    return e.bin("div", a, b, "f32", "full")


def emit_tree_sum_f32(e: TargetEmitter, values: Sequence[Value]) -> Value:
    """The checked mode's adjacent-pair tree (padded with -0.0) in f32 ``add.rn``."""
    return _tree(e, values, "f32", e.const(-0.0, "f32"), "add")


def emit_shfl_sum_f32(e: TargetEmitter, v: Value, offsets: Sequence[int]) -> Value:
    """The ``shfl.sync.bfly`` butterfly sum of
    :func:`tessera.lower.arith.mathlib.emit_shfl_sum_f64`, in f32 (one shuffle per step)."""
    _check(v, "f32", "emit_shfl_sum_f32")
    for off in _offsets(offsets):
        v = e.add(v, e.one(Shfl("bfly"), v, e.const(off, "u32")), "f32")
    return v


def _rel(x: float) -> Fraction:
    return Fraction(x)


def exp_error() -> float:
    """The relative error bound of :func:`emit_exp_fast` for a normal result
    (``|x| <= EXP_ARG_MAX``), rounded up.

    ``t = fl(x * L)`` with ``L = log2(e) (1 + eta)`` and ``|fl error| <= 2^-24``, so
    ``t = x log2(e) + D`` with ``|D| <= |x| log2(e) (eta + 2^-24 + eta 2^-24)``, and
    ``2^t = e^x 2^D``: a relative error of at most ``a e^a`` with ``a = ln(2) |D|``.
    ``ex2.approx`` adds its own ``r`` (:data:`~tessera.interp.target.approx.BOUNDS`):
    ``(1 + r)(1 + a e^a) - 1`` in all."""
    log2e = 1 / math.log(2)
    eta = abs(Fraction(LOG2E_F32) - Fraction(log2e)) / Fraction(log2e) * Fraction(1001, 1000)
    u = Fraction(1, 2**24)
    a = Fraction(EXP_ARG_MAX) * (eta + u + eta * u)  # ln(2) |D| = |x| (eta + u + eta u)
    growth = a * Fraction(math.exp(float(a) * 1.001))
    r = _rel(BOUNDS["ex2.approx.ftz.f32"].relative)
    return float((1 + r) * (1 + growth) - 1) * (1 + 2**-40)


def log_error() -> float:
    """The error bound of :func:`emit_log_fast` relative to ``|ln x| + 1``, rounded up:
    ``lg2``'s ``2^-22 (|log2 x| + 1)`` carried through the multiply by ``ln(2) (1 + eta)``
    (rounded, ``2^-24``) is at most ``(2^-22 (1 + eta')(1 + 2^-24) + eta + 2^-24 +
    eta 2^-24) (|ln x| + 1)``."""
    eta = abs(Fraction(LN2_F32) - Fraction(math.log(2))) / Fraction(math.log(2)) * Fraction(
        1001, 1000)
    u = Fraction(1, 2**24)
    r = _rel(BOUNDS["lg2.approx.ftz.f32"].relative)
    return float(r * (1 + eta) * (1 + u) + eta + u + eta * u) * (1 + 2**-40)


__all__ = ["EXP_ARG_MAX", "LN2_F32", "LOG2E_F32", "emit_div_fast", "emit_exp_fast",
           "emit_log_fast", "emit_shfl_sum_f32", "emit_tree_sum_f32", "exp_error",
           "log_error"]
