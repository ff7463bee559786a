"""Branch decisions remembered for read-only conditions."""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.tile.context import Ctx, frozen
from tessera.interp.tile.exec import Compiler, Step
from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.fastpaths.memo import ArrayMemo
from tessera.interp.tile.reference.flow import if_step, uniform
from tessera.ir.core import Instr
from tessera.ir.dialects import tile as tile_ir

#: branch decisions and selections of read-only conditions (masks of program
#: coordinates, see ``fastpaths.memo.coordinate_memo``)
_BRANCHES = ArrayMemo(64)


def _decide(cv: Any) -> bool | None:
    return _BRANCHES.get(cv, None, lambda: uniform(cv)) if np.ndim(cv) else bool(cv)


def _choose(ctx: Ctx, cv: Any, taking: bool) -> np.ndarray:
    return _BRANCHES.get(cv, (ctx.lead, taking), lambda: frozen(ctx.select(
        cv if taking else np.logical_not(cv))))


@register("branch_memo", tile_ir.If)
def branch_memo(c: Compiler, instr: Instr, reference: Step) -> Step:
    """A ``tile.if`` whose condition is a read-only array (a mask of program
    coordinates, ``local_id() < stride``) remembers whether it is uniform and which
    programs take each branch. Proof: read-only arrays are never modified, and
    :class:`~tessera.interp.tile.fastpaths.memo.ArrayMemo` keys them by identity with a
    weak reference (a new array at a reused address finds a dead reference), so a
    remembered answer is the one :func:`~tessera.interp.tile.reference.flow.uniform`
    and ``ctx.select`` would compute for the same values and programs (the context's
    program shape is part of the key). The branches run as in the reference."""
    REGISTRY["branch_memo"].taken += 1
    return if_step(c, instr, decide=_decide, choose=_choose)


__all__ = ["branch_memo"]
