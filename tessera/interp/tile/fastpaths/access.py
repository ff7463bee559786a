"""Fast paths of memory accesses: loads kept for the next trip, race-shadow entries
nothing reads, and the last store of a launch."""

from __future__ import annotations

import numpy as np

from tessera.interp.tile.exec import Compiler, Frame, Step
from tessera.interp.tile.fastpaths import REGISTRY, register
from tessera.interp.tile.phase import quiet_accesses
from tessera.interp.tile.reference.memory import load_step, store_step
from tessera.ir.core import Instr
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory


def _space(instr: Instr) -> str | None:
    t = instr.operands[0].type
    return t.space if isinstance(t, MemRefType) else None


@register("kept_loads", tile_memory.Load, tile_memory.LoadVector)
def kept_loads(c: Compiler, instr: Instr, reference: Step) -> Step | None:
    """The last large load of a tensor the launch never writes is kept by the launch:
    a loop that loads the same view every trip (flash attention's query tile) gets the
    same array, which operand caches (``mma``'s ``Widen``) recognise. Proof: the load
    runs again only through the same view object in the same programs (``is``), whose
    start arrays are never modified in place, of memory no step of the launch writes
    and whose reads are not tracked (``track_reads`` is off, so the reference's load
    records nothing): the reference would read the same values and change no sanitizer
    state; the view's bounds and alignment were checked when it was first loaded."""
    if _space(instr) != "global":
        return None
    src, out = c.slot(instr.operands[0]), c.slot(instr.results[0])
    token = object()
    me = REGISTRY["kept_loads"]

    def step(fr: Frame) -> None:
        ref = fr.regs[src]
        memo = fr.st.memo
        last = memo.get(token)
        if last is not None and last[0] is ref and last[1] is fr.ctx:
            me.taken += 1
            fr.regs[out] = last[2]
            return
        reference(fr)
        value, mem = fr.regs[out], ref.mem
        if not mem.written and not mem.track_reads and isinstance(value, np.ndarray) \
                and value.size >= 1024:
            memo[token] = (ref, fr.ctx, value)
    return step


@register(
    "quiet_accesses",
    tile_memory.Load,
    tile_memory.LoadVector,
    tile_memory.Store,
    tile_memory.Update,
    tile_memory.StoreVector,
)
def quiet(c: Compiler, instr: Instr, reference: Step) -> Step | None:
    """A shared access after which no shared access can run before a barrier or the
    kernel's end (:func:`tessera.interp.tile.phase.quiet_accesses`) does not record its
    race-shadow entries. Proof: an entry is read only by a later access of the group
    before the next barrier, which clears it (the end of the launch drops it), and the
    analysis shows there is none; the access's own checks against earlier entries
    still run, so the values and the reports are the reference's."""
    if _space(instr) != "shared" or instr not in c.cached("quiet", quiet_accesses):
        return None
    REGISTRY["quiet_accesses"].taken += 1
    if isinstance(instr.op, (tile_memory.Load, tile_memory.LoadVector)):
        return load_step(c, instr, record=False)
    return store_step(c, instr, record=False)


@register("last_store", tile_memory.Store, tile_memory.Update, tile_memory.StoreVector)
def last_store(c: Compiler, instr: Instr, reference: Step) -> Step | None:
    """The kernel's final statement, a global store, is not saved for the restore of a
    failed launch in the vectorised run. Proof: its write checks run first, as in the
    reference; after it nothing runs in the vectorised run, so nothing can fail and the
    saved copy would never be restored (a sequential run, which may be followed by
    nothing either, still saves). Values and reports are the reference's."""
    if _space(instr) != "global" or instr is not c.last:
        return None
    REGISTRY["last_store"].taken += 1
    return store_step(c, instr, last=True)


__all__ = ["kept_loads", "last_store", "quiet"]
