"""Which key blocks each query tile of an attention kernel reads, found at compile time.

Warp-specialised attention (:mod:`tessera.lower.sm90a.kvsplit`) runs ``C`` query tiles
(groups ``C * ctaid.x + w``) in one CTA over *one* K/V ring that a producer warpgroup
fills in the order of the CTA's last tile. That is only right when every tile's blocks
are a prefix of the last tile's, block for block: a causal program's key blocks
``0, BN, .. diagonal`` are, a non-causal program's are equal. The shapes are known when
a kernel is specialised, so the sequences are evaluated here, for every CTA, from the
kernel's own index arithmetic (constants, grid coordinates and integer ``+ - * // %
min max``); anything else, or a CTA whose tiles disagree, keeps one warpgroup.

Tiles of unequal lengths are offered only one block apart (that block's stage is never
refilled, so the shorter tile need not release it) and with key blocks as tall as the
query tiles (a causal program's diagonal is then one block): the Target IR interpreter
runs the two consumers of one region in lockstep, and with smaller blocks a consumer
would wait there for a release the other makes later in the same iteration, which the
GPU's independently scheduled warpgroups would not (that order is left unoffered
rather than unchecked).
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from tessera.ir.core import Function, Instr, Value
from tessera.ir.dialects.tile import Constant
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import ids as tile_ids
from tessera.ir.dialects.tile import memory as tile_memory

if TYPE_CHECKING:
    from tessera.lower.sm90a.kvplan import KvLoop

_INT_OPS = {
    tile_compute.Add: lambda a, b: a + b,
    tile_compute.Sub: lambda a, b: a - b,
    tile_compute.Mul: lambda a, b: a * b,
    tile_compute.FloorDiv: lambda a, b: a // b,
    tile_compute.Mod: lambda a, b: a % b,
    tile_compute.Maximum: max,
    tile_compute.Minimum: min,
}
#: block evaluations beyond which the check gives up (it runs once per specialisation)
MAX_BLOCKS = 1 << 20


class Unknown(Exception):
    """An index the compile-time evaluation does not model."""


class _Eval:
    """Integer values of one group's index arithmetic."""

    def __init__(self, fn: Function, group: int) -> None:
        self.grid = tuple(int(g) for g in fn.attrs.get("grid", (1,)))
        self.group = group
        self.env: dict[Value, int] = {}

    def __call__(self, v: Value) -> int:
        if v in self.env:
            return self.env[v]
        owner = v.owner
        if not isinstance(owner, Instr):
            raise Unknown(f"{v} is not an index")
        op = owner.op
        if isinstance(op, Constant) and isinstance(op.value, int | float):
            return int(op.value)
        if isinstance(op, tile_ids.GridCoord):
            inner = prod(self.grid[op.axis + 1:])
            return (self.group // inner) % self.grid[op.axis]
        if isinstance(op, tile_ids.GroupId | tile_ids.LinearId):
            return self.group
        fn = _INT_OPS.get(type(op))
        if fn is None:
            raise Unknown(f"{op.name} in a key block's index")
        return int(fn(*(self(x) for x in owner.operands)))

    def copy_index(self, copy: Instr) -> tuple[int, ...]:
        view = copy.operands[1].owner
        assert isinstance(view, Instr) and isinstance(view.op, tile_memory.View)
        return tuple(self(x) for x in view.operands[1:])


def block_sequence(fn: Function, loops: tuple[KvLoop, ...], group: int
                   ) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (K, V) view indices of every key block group ``group`` reads, in order."""
    ev = _Eval(fn, group)
    out = []
    for kv in loops:
        lo, hi, step = (ev(v) for v in kv.loop.operands[:3])
        for i in range(lo, hi, step):
            ev.env = {kv.loop.regions[0].block.args[0]: i}
            out.append((ev.copy_index(kv.k_copy), ev.copy_index(kv.v_copy)))
            if len(out) > MAX_BLOCKS:
                raise Unknown("too many key blocks to check")
    return out


def sharing_problem(fn: Function, loops: tuple[KvLoop, ...], consumers: int,
                    aligned: bool = True, equal: bool = False) -> str | None:
    """Why ``consumers`` consecutive query tiles cannot share one ring filled in the
    order of the CTA's last tile (None when they can; see the module doc). ``aligned``:
    key blocks as tall as the query tiles, the one case where tiles of unequal block
    counts are offered (see the module doc). ``equal``: every CTA has ``consumers``
    tiles that read a block at least (their warpgroups take turns,
    :mod:`tessera.lower.sm90a.turns`; a tile one block short takes an empty one)."""
    groups = prod(int(g) for g in fn.attrs.get("grid", (1,)))
    seen = 0
    try:
        for cta in range(-(-groups // consumers)):
            tiles = [consumers * cta + w for w in range(consumers)
                     if consumers * cta + w < groups]
            seqs = [block_sequence(fn, loops, g) for g in tiles]
            seen += sum(map(len, seqs))
            if seen > MAX_BLOCKS:
                return "too many key blocks to check at compile time"
            last = seqs[-1]
            if equal and len(tiles) < consumers:
                return (f"the last CTA has {len(tiles)} of {consumers} query tiles (the "
                        "ping-pong schedule needs every CTA's warpgroups to take turns)")
            for g, seq in zip(tiles, seqs):
                if equal and not seq:
                    return (f"query tile {g} reads no key block (the ping-pong schedule "
                            "needs a turn of every warpgroup)")
                if last[:len(seq)] != seq:
                    return (f"query tile {g} reads key blocks that are not a prefix of tile "
                            f"{tiles[-1]}'s")
                if len(last) - len(seq) > 1:
                    return (f"query tile {g} reads {len(last) - len(seq)} blocks fewer than "
                            f"tile {tiles[-1]} (at most one fewer is offered)")
                if len(seq) != len(last) and not aligned:
                    return (f"query tiles {g} and {tiles[-1]} read different numbers of "
                            "blocks of another size than their query rows")
    except Unknown as why:
        return f"the key blocks' order is not known at compile time ({why})"
    return None


__all__ = ["MAX_BLOCKS", "Unknown", "block_sequence", "sharing_problem"]
