"""The key-block loops of an attention kernel (:func:`match_kv_loops`: the loops whose
bodies copy a K and a V block, multiply ``Q Kᵀ`` and ``P V``, as the module doc of
:mod:`tessera.lower.sm90a.attention.plan` describes), and which key blocks each query tile
reads, found at compile time.

Warp-specialised attention (:mod:`tessera.lower.sm90a.attention.split`) runs ``C`` query tiles
(groups ``C * ctaid.x + w``) in one CTA over *one* K/V ring that a producer warpgroup
fills in the order of the CTA's last tile. That is only right when every tile's blocks
are a prefix of the last tile's, block for block: a causal program's key blocks
``0, BN, .. diagonal`` are, a non-causal program's are equal. The shapes are known when
a kernel is specialised, so the sequences are evaluated here, for every CTA, from the
kernel's own index arithmetic (constants, grid coordinates and integer ``+ - * // %
min max``); anything else, or a CTA whose tiles disagree, keeps one warpgroup.

Tiles of unequal lengths are offered only one block apart (that block's stage is never
refilled, so the shorter tile need not release it) and with key blocks as tall as the
query tiles (a causal program's diagonal is then one block): with smaller blocks a
consumer would wait for a release the other makes later in the same iteration, an
order left unoffered.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from tessera.ir.core import Function, Instr, Value, walk
from tessera.ir.dialects.tile import Constant, MemRefType
from tessera.ir.dialects.tile import For as TileFor
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import ids as tile_ids
from tessera.ir.dialects.tile import memory as tile_memory


@dataclass(frozen=True)
class KvLoop:
    """One matched key-block loop: its copies, barriers and the two products."""

    loop: Instr
    k_copy: Instr
    v_copy: Instr
    qk: Instr  # S = Q Kᵀ
    pv: Instr  # P V



def _owner(v: Value) -> Instr | None:
    return v.owner if isinstance(v.owner, Instr) else None


def _through(v: Value, kinds: tuple[type, ...]) -> Value:
    """``v`` with loads, transposes (``kinds``) peeled off."""
    owner = _owner(v)
    while owner is not None and isinstance(owner.op, kinds):
        v = owner.operands[0]
        owner = _owner(v)
    return v


def _param_view(v: Value) -> bool:
    owner = _owner(v)
    return (owner is not None and isinstance(owner.op, tile_memory.View)
            and isinstance(owner.operands[0].type, MemRefType)
            and _owner(owner.operands[0]) is None)


def _match_loop(loop: Instr, allocs: dict[Value, Instr]) -> tuple[KvLoop, Value, Value] | None:
    body = loop.regions[0].block
    copies = [i for i in body.instrs if isinstance(i.op, tile_memory.CpAsync)]
    mmas = [i for i in body.instrs if isinstance(i.op, tile_compute.Mma)]
    if len(copies) != 2 or len(mmas) != 2 or any(i.regions for i in body.instrs):
        return None
    qk, pv = mmas
    peel = (tile_memory.Load, tile_compute.Transpose)
    k_buf = _through(qk.operands[1], peel)
    v_buf = _through(pv.operands[1], (tile_memory.Load,))
    q_buf = _through(qk.operands[0], (tile_memory.Load,))
    a_owner = _owner(pv.operands[0])
    if (k_buf not in allocs or v_buf not in allocs or q_buf not in allocs
            or len({k_buf, v_buf, q_buf}) != 3 or len(qk.operands) != 2
            or len(pv.operands) not in (2, 3)
            or a_owner is None or isinstance(a_owner.op, tile_memory.Load)):
        return None
    by_dst = {c.operands[0]: c for c in copies}
    k_copy, v_copy = by_dst.get(k_buf), by_dst.get(v_buf)
    if k_copy is None or v_copy is None or not all(_param_view(c.operands[1])
                                                   for c in copies):
        return None
    transposed = _owner(qk.operands[1])
    if transposed is None or not isinstance(transposed.op, tile_compute.Transpose):
        return None
    step = _owner(loop.operands[2])
    if step is None or not isinstance(step.op, Constant) or int(step.op.value) <= 0:
        return None  # the ring counts trips as ceil((hi - lo) / step)
    return KvLoop(loop, k_copy, v_copy, qk, pv), k_buf, v_buf


def _defined_before(v: Value, fn: Function, first: int) -> bool:
    """``v`` is a parameter, a constant, or defined at top level before instruction
    ``first`` (the first key loop): the ring's prologue can evaluate it."""
    owner = _owner(v)
    if owner is None or isinstance(owner.op, Constant):
        return True
    return owner in fn.body.instrs[:first]


def _outside_inputs(loop: Instr) -> list[Value]:
    """Values a loop's bounds and body read from outside the loop."""
    body = loop.regions[0].block
    inside = set(body.args) | {r for i in body.instrs for r in i.results}
    out = list(loop.operands[:3])
    for instr in body.instrs:
        out += [v for v in instr.operands if v not in inside]
    return out


def match_kv_loops(fn: Function) -> tuple[tuple[KvLoop, ...], Instr, Instr] | None:
    """The kernel's key-block loops and its K and V buffers (see the module doc)."""
    allocs = {i.results[0]: i for i in fn.body.instrs
              if isinstance(i.op, tile_memory.AllocShared)}
    found: list[KvLoop] = []
    bufs: set[tuple[Value, Value]] = set()
    for instr in fn.body.instrs:
        if isinstance(instr.op, TileFor):
            m = _match_loop(instr, allocs)
            if m is not None:
                found.append(m[0])
                bufs.add((m[1], m[2]))
    if not found or len(bufs) != 1:
        return None
    k_buf, v_buf = next(iter(bufs))
    mine = {id(i) for kv in found for i in (kv.k_copy, kv.v_copy)}
    for instr in walk(fn.body):  # nothing else writes or reads K and V
        if any(v in (k_buf, v_buf) for v in instr.operands):
            if isinstance(instr.op, tile_memory.CpAsync):
                if id(instr) not in mine:
                    return None
            elif not isinstance(instr.op, tile_memory.Load) or not any(
                    instr in kv.loop.regions[0].block.instrs for kv in found):
                return None
    first = fn.body.instrs.index(found[0].loop)
    for kv in found[1:]:  # later loops' copies and bounds known before the first
        if not all(_defined_before(v, fn, first) or _carried(v, found)
                   for v in _outside_inputs(kv.loop)):
            return None
    return tuple(found), allocs[k_buf], allocs[v_buf]


def _carried(v: Value, loops: list[KvLoop]) -> bool:
    """A result of an earlier key loop (the carried accumulators): only the softmax
    reads it, never the copies or bounds."""
    return any(v in kv.loop.results for kv in loops)


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


__all__ = ["MAX_BLOCKS", "KvLoop", "Unknown", "block_sequence", "match_kv_loops",
           "sharing_problem"]
