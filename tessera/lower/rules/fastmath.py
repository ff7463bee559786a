"""Lowering rules that exist only in fast mode.

* ``log``: ``lg2.approx.ftz.f32``. Checked mode has no specified ``log`` algorithm (the
  tile simulator's is NumPy's), so ``log`` stays in :data:`tessera.lower.core.NOT_LOWERED`
  and a checked kernel's ``log`` is refused at its line; in fast mode this rule
  (:data:`~tessera.lower.core.FAST_RULES`) lowers it to the hardware approximation of
  :func:`tessera.lower.fastmath.emit_log_fast`.
* ``exp(a - b)`` with ``b`` broadcast (a softmax's ``exp(s - m[:, None])``,
  :func:`tessera.lower.fastmath.shifted_exp`): the ``sub`` emits nothing and hands its
  operands to the ``exp``, which emits ``-(b log2(e))`` once per register of ``b`` (a
  row-broadcast vector shares its registers across the row) and ``fma`` + ``ex2`` per
  element. Every other ``sub`` and ``exp`` takes its checked-mode rule (whose ``exp``
  in fast mode is ``mul`` + ``ex2``).
* ``x * c`` by a positive constant read only by row maxima and by such fused exps
  (attention's ``scores * scale``, :func:`tessera.lower.fastmath.folded_scale`): the
  ``mul`` emits nothing; a row max reduces ``x`` and multiplies its result by ``c``
  once a row (the same bits), and the ``exp`` takes ``c log2(e)`` as its ``fma``'s
  constant (FlashAttention-3's ``softmax_scale_log2``): one instruction per score
  fewer.
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value, uses
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.lower.core import RULES, Lowerer, fast_rule
from tessera.lower.fastmath import (
    emit_log_fast,
    emit_neg_shift,
    emit_shifted_exp_fast,
    folded_scale,
    shifted_exp,
)
from tessera.lower.rules.scalar import elementwise, result_type, round_to
from tessera.lower.rules.tensor import materialize
from tessera.lower.values import Dist, Lowered, reg_type


@fast_rule(tile_compute.Log)
def _log(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    t = result_type(instr)
    if reg_type(t.element, f"{instr.op.name}: ") != "f32":
        raise UnsupportedError(f"{instr.op.name} of {t.element} is not lowered",
                               loc=instr.loc)
    return elementwise(low, instr, args,
                       lambda e, r: round_to(e, emit_log_fast(e, r[0]), t.element), "f32")


@dataclass(frozen=True)
class Deferred:
    """The value of a ``tile.sub`` whose only user, an ``exp``, emits it fused: its
    operands, lowered (no rule but the ``exp``'s reads it); ``a`` times ``scale`` is the
    minuend (a folded ``mul``)."""

    a: Dist
    b: Dist
    scale: float = 1.0


@dataclass(frozen=True)
class Scaled:
    """The value of a ``tile.mul`` by a positive constant that emits nothing
    (:func:`tessera.lower.fastmath.folded_scale`): ``x`` lowered, and the scale."""

    x: Dist
    scale: float


def _users(low: Lowerer) -> dict[Value, list[Instr]]:
    if "fast_users" not in low.extra:
        low.extra["fast_users"] = uses(low.fn.body)
    return low.extra["fast_users"]


def _shifted_sub(low: Lowerer, sub: Instr) -> bool:
    users = _users(low).get(sub.results[0], [])  # (an overridden exp takes no Deferred)
    return len(users) == 1 and id(users[0]) not in low.overrides and \
        shifted_exp(users[0], _users(low)) is sub


def _checked(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    return list(RULES[type(instr.op)](low, instr, args))


def _unscaled(low: Lowerer, lv: Lowered) -> Lowered:
    """A folded ``mul``'s value as the checked rules need it: ``x * c``, rounded."""
    if not isinstance(lv, Scaled):
        return lv
    e, c = low.em, low.em.const(lv.scale, "f32")
    return Dist(lv.x.layout, [e.mul(r, c, "f32") for r in lv.x.regs], "f32")


@fast_rule(tile_compute.Mul)
def _mul(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    scale = folded_scale(instr, _users(low))
    if scale is not None and not any(id(u) in low.overrides
                                     for u in _users(low).get(instr.results[0], [])):
        x = materialize(low, args[0], low.layouts.get(instr.operands[0]))
        if isinstance(x, Dist) and x.type == "f32" and \
                x.layout == low.layouts.get(instr.results[0]):
            return [Scaled(x, scale)]  # type: ignore[list-item]
    return _checked(low, instr, args)


@fast_rule(tile_compute.Reduce)
def _reduce(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    x = args[0]
    if not isinstance(x, Scaled):
        return _checked(low, instr, args)
    (out,) = _checked(low, instr, [x.x])  # the row max of x, then times c: the same bits
    assert isinstance(out, Dist)
    e, c, made = low.em, low.em.const(x.scale, "f32"), {}  # type: ignore[var-annotated]
    for r in out.regs:
        if r not in made:
            made[r] = e.mul(r, c, "f32")
    return [Dist(out.layout, [made[r] for r in out.regs], out.type)]


@fast_rule(tile_compute.Sub)
def _sub(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    scale = args[0].scale if isinstance(args[0], Scaled) else 1.0
    if not _shifted_sub(low, instr):
        return _checked(low, instr, [_unscaled(low, lv) for lv in args])
    a, b = (materialize(low, lv.x if isinstance(lv, Scaled) else lv, low.layouts.get(v))
            for lv, v in zip(args, instr.operands))
    if not (isinstance(a, Dist) and isinstance(b, Dist) and a.type == b.type == "f32"
            and len(a.regs) == len(b.regs)):
        return _checked(low, instr, [_unscaled(low, lv) for lv in args])
    return [Deferred(a, b, scale)]  # type: ignore[list-item]


@fast_rule(tile_compute.Exp)
def _exp(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    x = args[0]
    if not isinstance(x, Deferred):
        return _checked(low, instr, args)
    e = low.em
    shifts: dict[Value, Value] = {}
    out = []
    for a, b in zip(x.a.regs, x.b.regs):
        if b not in shifts:
            shifts[b] = emit_neg_shift(e, b)
        out.append(emit_shifted_exp_fast(e, a, shifts[b], x.scale))
    return [Dist(x.a.layout, out, "f32")]
