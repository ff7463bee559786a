"""Lowering rules that exist only in fast mode: ``log`` as ``lg2.approx.ftz.f32``.

Checked mode has no specified ``log`` algorithm (the tile simulator's is NumPy's), so
``log`` stays in :data:`tessera.lower.core.NOT_LOWERED` and a checked kernel's ``log``
is refused at its line; in fast mode this rule (:data:`~tessera.lower.core.FAST_RULES`)
lowers it to the hardware approximation of :func:`tessera.lower.fastmath.emit_log_fast`.
"""

from __future__ import annotations

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.lower.core import Lowerer, fast_rule
from tessera.lower.fastmath import emit_log_fast
from tessera.lower.rules.scalar import elementwise, result_type, round_to
from tessera.lower.values import Lowered, reg_type


@fast_rule(tile_compute.Log)
def _log(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    t = result_type(instr)
    if reg_type(t.element, f"{instr.op.name}: ") != "f32":
        raise UnsupportedError(f"{instr.op.name} of {t.element} is not lowered",
                               loc=instr.loc)
    return elementwise(low, instr, args,
                       lambda e, r: round_to(e, emit_log_fast(e, r[0]), t.element), "f32")
