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
    operands, lowered (no rule but the ``exp``'s reads it)."""

    a: Dist
    b: Dist


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


@fast_rule(tile_compute.Sub)
def _sub(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    if not _shifted_sub(low, instr):
        return _checked(low, instr, args)
    a, b = (materialize(low, lv, low.layouts.get(v)) for lv, v in zip(args, instr.operands))
    if not (isinstance(a, Dist) and isinstance(b, Dist) and a.type == b.type == "f32"
            and len(a.regs) == len(b.regs)):
        return _checked(low, instr, args)
    return [Deferred(a, b)]  # type: ignore[list-item]


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
        out.append(emit_shifted_exp_fast(e, a, shifts[b]))
    return [Dist(x.a.layout, out, "f32")]
