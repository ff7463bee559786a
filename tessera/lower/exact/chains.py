"""The chains of exact accumulators in a kernel, and which of them can share one
buffer in shared memory.

An exact accumulator flows through the results of exact ``mma`` ops
(:mod:`tessera.lower.exact.mma`) or of carried exact sums (``tile.reduce(x, c)``,
:mod:`tessera.lower.exact.carried`) and the loop and branch slots they reach
(:func:`tessera.interp.tile.wide.possibly_exact`); the values one accumulator flows
through form a *chain*, which lives in one buffer (long accumulators, one per element:
176 bytes each for an ``mma``'s, 88 for a sum of f32 terms). Chains whose live
ranges never overlap may use the same buffer: the three exact passes over key blocks of attention
(:mod:`tessera.ir.transforms.to_tile.attention.keyblocks`) compute each block's scores in three
loops that run one after the other, so their score accumulators take one buffer, not
three. Live ranges are intervals over the kernel's top-level instructions (a value
inside a loop lives for the whole loop); buffers are handed out as in linear-scan
register allocation (Poletto and Sarkar, "Linear scan register allocation", TOPLAS 21,
1999): a chain takes a buffer whose previous chains all ended before it starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tessera.interp.tile.wide import possibly_exact
from tessera.ir.core import Function, Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.structured import value_slots
from tessera.ir.unionfind import UnionFind


def carried_operand(instr: Instr) -> int | None:
    """The operand of ``instr`` that it continues without rounding (an exact ``mma``'s
    accumulator, a carried sum's or mean's), or None."""
    op = instr.op
    if isinstance(op, tile_compute.Mma) and op.exact and len(instr.operands) == 3:
        return 2
    if is_carried(instr):
        return 1
    return None


def is_carried(instr: Instr) -> bool:
    """Whether ``instr`` is a carried exact sum or mean (``tile.reduce(x, c)``)."""
    op = instr.op
    return isinstance(op, tile_compute.Reduce) and op.exact and len(instr.operands) == 2


def is_zero(v: Value) -> bool:
    """Whether ``v`` is a zero tile (``tile.full`` 0) or scalar (``tile.constant`` 0),
    which starts a chain (its buffer starts zeroed) or adds nothing to one."""
    owner = v.owner
    return isinstance(owner, Instr) and isinstance(owner.op, (
        tile_compute.Full, tile_ir.Constant)) and float(owner.op.value) == 0.0  # type: ignore[attr-defined]


def chains(fn: Function) -> dict[Value, Value]:
    """Every value of an exact chain (and the starting values that flow into it) ->
    the chain's representative."""
    exact = possibly_exact(fn)
    ch = UnionFind[Value]()

    def join(a: Value, b: Value) -> None:
        # a starting value (zeros) joins no chain: one ``tile.full`` may start several
        ch.find(a)
        ch.find(b)
        if a in exact and b in exact:
            ch.join(a, b)

    for instr in walk(fn.body):
        op = instr.op
        if isinstance(op, tile_compute.Mma) and op.exact:
            ch.find(instr.results[0])
            if len(instr.operands) == 3:
                join(instr.operands[2], instr.results[0])
        elif is_carried(instr):  # a sum continues its accumulator; a mean ends it
            ch.find(instr.operands[1])
            if op.kind == "sum":  # type: ignore[attr-defined]
                ch.find(instr.results[0])
                join(instr.operands[1], instr.results[0])
        elif isinstance(op, (tile_ir.For, tile_ir.While, tile_ir.If)):
            for sources, targets in value_slots(instr):
                members = [v for v in (*sources, *targets) if v in exact]
                if members:
                    for m in (*sources, *targets):
                        join(members[0], m)
    return {v: ch.find(v) for v in ch.parent}


def live_ranges(fn: Function, members: dict[Value, Value],
                exact: set[Value]) -> dict[Value, tuple[int, int]]:
    """Each chain (by representative) -> the first and last index, among ``fn``'s
    top-level instructions, of an instruction that defines or uses one of its values
    (an instruction in a loop or branch counts as the top-level one holding it)."""
    where: dict[Value, int] = {}  # the top-level index of each defined value
    uses: dict[Value, list[int]] = {}
    for n, top in enumerate(fn.body.instrs):
        for instr in (top, *(i for region in top.regions for i in walk(region))):
            for v in instr.results:
                where[v] = n
            for region in instr.regions:
                for block in region.blocks:
                    for arg in block.args:
                        where[arg] = n
            for v in instr.operands:
                uses.setdefault(v, []).append(n)
    ranges: dict[Value, tuple[int, int]] = {}
    for v, root in members.items():
        if v not in exact:  # a starting value (zeros) holds no accumulator
            continue
        points = [where[v], *uses.get(v, [])]
        lo, hi = ranges.get(root, (min(points), max(points)))
        ranges[root] = (min(lo, *points), max(hi, *points))
    return ranges


@dataclass
class AccBuffer:
    """One shared buffer and the chains that take it in turn."""

    size: int                       #: bytes: its largest chain's
    chains: list[Value] = field(default_factory=list)
    end: int = -1                   #: the last top-level index its chains reach


def share(ranges: dict[Value, tuple[int, int]], sizes: dict[Value, int]) -> list[AccBuffer]:
    """Buffers for the chains of ``ranges`` (``sizes`` in bytes): in order of their
    first instruction, each chain takes a buffer whose chains have all ended before it
    starts: the smallest that holds it, else the largest (which grows least), else a
    new one. Chains live at once never share: an instruction where one ends and another
    starts holds both."""
    slots: list[AccBuffer] = []
    for root in sorted(ranges, key=lambda r: (ranges[r][0], ranges[r][1])):
        lo, hi = ranges[root]
        free = [s for s in slots if s.end < lo]
        holds = [s for s in free if s.size >= sizes[root]]
        slot = (min(holds, key=lambda s: s.size) if holds else
                max(free, key=lambda s: s.size) if free else None)
        if slot is None:
            slot = AccBuffer(0)
            slots.append(slot)
        slot.size = max(slot.size, sizes[root])
        slot.chains.append(root)
        slot.end = hi
    return slots


__all__ = ["AccBuffer", "carried_operand", "chains", "is_carried", "is_zero", "live_ranges",
           "share"]
