"""Register release: a tile value's slot is cleared after its last use in its block.

The simulator keeps every value of a block in a register list. Without release, a
loop body's temporaries stay alive until the next trip overwrites their slots, so each
trip allocates fresh arrays while the previous trip's are still held: twice the
working set, and memory that is cold in the caches. Clearing a slot after the last
step that reads it hands the array back to the allocator at once, and the next array
of that size reuses the same, cache-warm memory (flash attention: about 5% faster).

Only tile values (rank >= 1) that are defined by an instruction of the block are
released; block arguments, scalars and the values the block's terminator yields are
left alone. A use inside a nested region counts as a use by the instruction that
holds the region.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tessera.ir.core import Block, Instr, Value, walk
from tessera.ir.types import TensorType


def last_uses(block: Block, kept: list[Instr], fused: dict[Instr, Instr]) -> list[list[Value]]:
    """For each instruction of ``kept`` (the block's steps, in order; ``fused`` maps a
    consumer to the producer it runs), the tile values whose last use it is."""
    last: dict[Value, int] = {}
    for j, instr in enumerate(kept):
        group = [instr, fused[instr]] if instr in fused else [instr]
        for top in group:
            for inner in walk(top):
                for v in inner.operands:
                    last[v] = j
        for r in instr.results:  # a result nobody reads dies where it is made
            last.setdefault(r, j)
    term = block.terminator
    keep = set(term.operands) if term is not None else set()
    dead: list[list[Value]] = [[] for _ in kept]
    for instr in kept:
        for r in instr.results:
            if r in keep or not isinstance(r.type, TensorType) or not r.type.rank:
                continue
            dead[last[r]].append(r)
    return dead


def releasing(step: Callable[[Any], None], slots: list[int]) -> Callable[[Any], None]:
    """``step``, then clear ``slots`` of the frame's registers."""
    def run(fr: Any) -> None:
        step(fr)
        regs = fr.regs
        for s in slots:
            regs[s] = None
    for attr in ("loc", "opname"):  # the runner's error reports name the op
        if hasattr(step, attr):
            setattr(run, attr, getattr(step, attr))
    return run


__all__ = ["last_uses", "releasing"]
