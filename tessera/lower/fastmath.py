"""Target IR for Tile IR math in fast mode: the hardware's approximate instructions.

A kernel compiled with ``mode="fast"`` trades the checked mode's reproducible bits for
speed (docs/ptx-backend.md, "Fast-math mode"); no float64 instruction is left:

* ``exp(x)`` of f32 is ``mul.rn.f32 t, x, log2(e)`` then ``ex2.approx.ftz.f32 d, t``
  (CUDA's ``__expf``). ``.ftz`` is chosen because the flushed results are below
  2^-126, which no sum they enter can tell from zero at f32 precision relative to the
  values that dominate it (a softmax row's maximum contributes 1), and the subnormal
  form costs extra instructions around the approximation (docs/ptx-backend.md).
* ``exp(a - b)`` with ``b`` broadcast (a softmax's row max, :func:`shifted_exp`) is
  ``fma.rn.f32 t, a, log2(e), -(b log2(e))`` then ``ex2``, the product ``b log2(e)``
  made once per register of ``b`` (FlashAttention-3's and CUDA's ``__expf``
  softmaxes): one instruction per element fewer, at an error that grows with ``|b|``
  (:func:`exp_error` with ``shift``).
* ``log(x)`` is ``lg2.approx.ftz.f32`` then ``mul.rn.f32`` by ln(2).
* ``a / b`` of f32 is ``div.full.f32`` (2 ulp over the full range; ``div.approx`` is
  not accurate for ``|b| > 2^126``).
* a float ``row_sum`` is the checked mode's tree and butterfly shape in f32, except of
  an accumulator-layout tile: the thread's own values first, then one butterfly per
  row (:mod:`tessera.lower.rules.reduce`).

The error each instruction may add is :data:`tessera.interp.target.approx.BOUNDS`;
:func:`exp_error` composes the ``exp`` sequence's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from tessera.interp.target.approx import BOUNDS
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.ops import Shfl
from tessera.ir.dialects.tile import Constant
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.lower.arith.mathlib import _check, _offsets, _tree
from tessera.lower.emit import TargetEmitter

#: log2(e) and ln(2) rounded to float32 (the immediates of the two multiplies)
LOG2E_F32 = float(np.float32(1 / math.log(2)))
LN2_F32 = float(np.float32(math.log(2)))
#: the largest |x| whose exp has a finite, normal f32 value (e^88.73 > 2^128,
#: e^-87.34 < 2^-126); outside, both modes give inf, or values below 2^-126
EXP_ARG_MAX = 88.73
#: the largest ``|b|`` of ``exp(a - b)`` (:func:`shifted_exp`) the fast tolerance
#: assumes: ``b log2(e)`` is rounded, an error of up to ``|b| 2^-24`` in the exponent
SHIFT_MAX = 256.0


def emit_exp_fast(e: TargetEmitter, x: Value) -> Value:
    """e^x of an f32 register as ``ex2.approx.ftz.f32(x * log2(e))``."""
    _check(x, "f32", "emit_exp_fast")
    t = e.mul(x, e.const(LOG2E_F32, "f32"), "f32")
    return e.un("ex2", t, "f32", "approx.ftz")


def shifted_exp(instr: Instr, users: dict[Value, list[Instr]]) -> Instr | None:
    """The ``tile.sub`` whose ``a - b`` the f32 ``tile.exp`` ``instr`` takes, where ``b``
    is a ``tile.broadcast`` and the difference has no other use (``users``: every
    use in the kernel); fast mode lowers the pair as ``ex2(fma(a, log2(e), -(b
    log2(e))))``. None for any other ``exp``."""
    if not isinstance(instr.op, tile_compute.Exp) or element_name(instr.results[0].type) != "f32":
        return None
    sub = instr.operands[0].owner
    if not isinstance(sub, Instr) or not isinstance(sub.op, tile_compute.Sub) or \
            users.get(sub.results[0]) != [instr]:
        return None
    shift = sub.operands[1].owner
    if not isinstance(shift, Instr) or not isinstance(shift.op, tile_compute.Broadcast) or \
            any(element_name(v.type) != "f32" for v in sub.operands):
        return None
    return sub


def folded_scale(instr: Instr, users: dict[Value, list[Instr]]) -> float | None:
    """The scale ``c`` of an f32 ``tile.mul`` ``x * c`` (``c`` a positive, finite,
    broadcast constant: attention's ``scores * scale``) whose every user takes ``x``
    instead in fast mode: a row max, which is then multiplied by ``c`` once a row
    (rounding is monotonic, so ``max(fl(x c)) = fl(max(x) c)`` bit for bit), and the
    fused ``exp(x c - b)`` (:func:`shifted_exp`), which folds ``c`` into its ``fma``'s
    constant. None for any other ``mul``."""
    if not isinstance(instr.op, tile_compute.Mul) or element_name(instr.results[0].type) != "f32":
        return None
    scale = None
    for k, v in enumerate(instr.operands):
        owner = v.owner
        if isinstance(owner, Instr) and isinstance(owner.op, tile_compute.Broadcast):
            const = owner.operands[0].owner
            if isinstance(const, Instr) and isinstance(const.op, Constant) and \
                    isinstance(const.op.value, float) and k == 1:
                scale = float(np.float32(const.op.value))
    if scale is None or not 0.0 < scale < math.inf:
        return None
    result = instr.results[0]
    for user in users.get(result, []):
        if isinstance(user.op, tile_compute.Reduce) and user.op.kind == "max":
            continue
        if isinstance(user.op, tile_compute.Sub) and user.operands[0] is result and \
                user.operands[1] is not result and any(
                    shifted_exp(u, users) is user for u in users.get(user.results[0], [])):
            continue
        return None
    return scale


def element_name(t: object) -> str:
    """The storage format's name of a tensor type's element ("" for anything else)."""
    from tessera.numerics import storage_of

    try:
        return storage_of(t.element).name  # type: ignore[attr-defined]
    except (AttributeError, KeyError, ValueError):
        return ""


def emit_shifted_exp_fast(e: TargetEmitter, a: Value, neg_shift: Value,
                          scale: float = 1.0) -> Value:
    """e^(a c - b) of f32 registers as ``ex2.approx.ftz.f32(fma.rn(a, c log2(e), nb))``
    with ``nb = b * -log2(e)`` (:func:`emit_neg_shift`, made once per ``b``) and
    ``c log2(e)`` rounded once to f32 (``c = 1``: ``log2(e)``'s own rounding)."""
    _check(a, "f32", "emit_shifted_exp_fast")
    t = e.fma(a, e.const(float(np.float32(scale / math.log(2))), "f32"), neg_shift, "f32")
    return e.un("ex2", t, "f32", "approx.ftz")


def emit_neg_shift(e: TargetEmitter, b: Value) -> Value:
    """``-(b log2(e))`` rounded once: ``b * -log2(e)`` (negation is exact)."""
    _check(b, "f32", "emit_neg_shift")
    return e.mul(b, e.const(-LOG2E_F32, "f32"), "f32")


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


def exp_error(shift: float = 0.0, scaled: bool = False) -> float:
    """The relative error bound of :func:`emit_exp_fast` for a normal result
    (``|x| <= EXP_ARG_MAX``), rounded up; with ``shift`` > 0, that of
    :func:`emit_shifted_exp_fast` for ``exp(a - b)`` with ``|b| <= shift``, against
    ``exp(x)`` of the checked mode's ``x = fl(a - b)``.

    ``t = fl(x * L)`` with ``L = log2(e) (1 + eta)`` and ``|fl error| <= 2^-24``, so
    ``t = x log2(e) + D`` with ``|D| <= |x| log2(e) (eta + 2^-24 + eta 2^-24)``, and
    ``2^t = e^x 2^D``: a relative error of at most ``a e^a`` with ``a = ln(2) |D|``.
    Shifted, ``t = fl(a L - fl(b L))``: ``x`` differs from ``a - b`` by ``u |a - b|``,
    ``fl(b L)`` from ``b L`` by ``u |b| L``, and the ``fma`` rounds once, so
    ``|D| <= log2(e) (|a - b| (eta + u + u (1 + eta)) + |b| u (1 + eta)(1 + u))`` with
    ``u = 2^-24`` and ``|a - b| <= |x| (1 + 2u)``. ``scaled`` (a folded scale,
    :func:`folded_scale`: ``t = fl(y fl(c log2(e)) - fl(b L))`` where the checked mode
    rounds ``a = fl(y c)``): ``a`` is not rounded and ``c log2(e)`` is, at most
    ``|a| 2u (1 + eta)`` more in ``|D|``, with ``|a| <= |a - b| + |b|``.
    ``ex2.approx`` adds its own ``r`` (:data:`~tessera.interp.target.approx.BOUNDS`):
    ``(1 + r)(1 + a e^a) - 1`` in all."""
    log2e = 1 / math.log(2)
    eta = abs(Fraction(LOG2E_F32) - Fraction(log2e)) / Fraction(log2e) * Fraction(1001, 1000)
    u = Fraction(1, 2**24)
    if shift > 0:  # ln(2) |D| with the bounds above
        diff = Fraction(EXP_ARG_MAX) * (1 + 2 * u)
        a = diff * (eta + u + u * (1 + eta)) + Fraction(shift) * u * (1 + eta) * (1 + u)
        if scaled:
            a += (diff + Fraction(shift)) * 2 * u * (1 + eta)
    else:
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


__all__ = ["EXP_ARG_MAX", "LN2_F32", "LOG2E_F32", "SHIFT_MAX", "element_name",
           "emit_div_fast", "emit_exp_fast", "emit_log_fast", "emit_neg_shift",
           "emit_shfl_sum_f32", "emit_shifted_exp_fast", "emit_tree_sum_f32", "exp_error",
           "folded_scale", "log_error", "shifted_exp"]
