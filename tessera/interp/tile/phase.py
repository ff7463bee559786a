"""Shared-memory accesses whose race-shadow entries nothing can read.

Checked mode records, per shared element, which tile wrote and which read it since the
last barrier (:mod:`.memory.shared`); a later access by another tile of the group before
the next barrier consults those entries and reports a race. An entry is read only by
such a later access: the next barrier clears it, the end of the launch drops it. So
when no shared-memory access can run after an access before a barrier or the end of
the kernel, its entries are never consulted and recording them is skipped (the
access's own checks against earlier entries still run). This is common: the store
before a reduction's barrier, the final read of a reduction's result.

The analysis is conservative. After an access come the rest of its block, then, when
the block is a region of a ``tile.if``, the if's other regions (programs that took the
other branch run it later in the simulator's order) and what follows the if; a block
of a loop is never followed by "nothing" (the next trip may access the buffer). Any op
with a shared-memory operand other than a view or a buffer choice counts as an access,
as does any op whose regions hold one; a barrier ends the search only in the blocks
walked, not inside a nested region (a divergent barrier there is reported, but need
not clear every program's entries).
"""

from __future__ import annotations

from tessera.ir.core import Function, Instr, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory

#: the shared-memory ops that take a ``record`` flag (loads, stores, updates)
_RECORDING = (
    tile_memory.Load,
    tile_memory.LoadVector,
    tile_memory.Store,
    tile_memory.Update,
    tile_memory.StoreVector,
)
#: ops with shared operands that compute an address, not an access
_ADDRESSING = (tile_memory.View, tile_memory.Select)


def _shared(instr: Instr) -> bool:
    return any(isinstance(v.type, MemRefType) and v.type.space == "shared"
               for v in instr.operands)


def _accesses(instr: Instr) -> bool:
    """Whether ``instr`` (or an op in its regions) may access shared memory."""
    if _shared(instr) and not isinstance(instr.op, _ADDRESSING):
        return True
    return any(_accesses(i) for region in instr.regions for b in region.blocks
               for i in b.instrs)


def _quiet_after(instr: Instr, owners: dict[int, Instr]) -> bool:
    """Whether no shared access can follow ``instr`` before a barrier or the end."""
    block = instr.parent
    rest = block.instrs[block.instrs.index(instr) + 1:] if block is not None else []
    while block is not None:
        for i in rest:
            if isinstance(i.op, tile_memory.Barrier):
                return True
            if _accesses(i):
                return False
        owner = owners.get(id(block))
        if owner is None:
            return True  # the kernel's body ends: the launch's shadows are dropped
        if not isinstance(owner.op, tile_ir.If):
            return False  # a loop's next trip, or an unknown region kind
        if any(_accesses(i) for region in owner.regions if region.block is not block
               for i in region.block.instrs):
            return False
        block = owner.parent
        rest = block.instrs[block.instrs.index(owner) + 1:] if block is not None else []
    return False


def quiet_accesses(fn: Function) -> set[Instr]:
    """The shared loads and stores of ``fn`` after which, in every program, no
    shared-memory access runs before a barrier or the kernel's end: their race-shadow
    entries would be cleared unread, so they need not be recorded."""
    owners: dict[int, Instr] = {}
    candidates: list[Instr] = []
    for instr in walk(fn.body):
        for region in instr.regions:
            for b in region.blocks:
                owners[id(b)] = instr
        if isinstance(instr.op, _RECORDING) and _shared(instr):
            candidates.append(instr)
    return {i for i in candidates if _quiet_after(i, owners)}


__all__ = ["quiet_accesses"]
