"""Broadcast hoisting: a broadcast of a computed tile becomes broadcasts of the tiles it
is computed from, and the elementwise ops are recomputed at the broadcast shape.

A generated kernel computes on a small operand before broadcasting it
(``maximum(x, b * 0.5)`` scales the row vector ``b``, then broadcasts it over ``x``'s
rows). The lowering holds a broadcast's operand in a layout only where one is defined
for it (a loaded tile is a view any use reads in its own layout; a row statistic of a
reduction has its row layout), so a vector computed in the blocked layout of its own
shape cannot be spread over a larger tile without moving data between threads. Ops
that compute elementwise give the same bits wherever they run, so this rewrite moves
each such broadcast up to the chain's sources — loaded tiles, constants, reduction
results — and recomputes the chain on the broadcast tiles, each thread for the
elements it holds.

It applies to the top-level and nested blocks of a kernel; what it leaves unused is
removed.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.ir.core import Block, Function, Instr, Op, Value, clone_block, walk
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType

#: ops that compute each element from the same element of their operands
_ELEMENTWISE = (tile_compute.Binary, tile_compute.Unary, tile_compute.Where,
                tile_compute.Cast)


def hoist_broadcasts(fn: Function) -> Function:
    """A copy of the ``tile.kernel`` ``fn`` in which no broadcast reads the result of an
    elementwise op or a ``full`` (``fn`` itself is unchanged)."""
    from tessera.lower.exact.msetable import term_broadcasts

    body = clone_block(fn.body, {})
    _Hoister(body, term_broadcasts(body)).run()
    return Function(fn.name, body, list(fn.result_types), fn.kind, dict(fn.attrs), fn.loc)


def _tensor(v: Value) -> bool:
    return isinstance(v.type, TensorType) and v.type.rank > 0


class _Hoister:
    """Rebuilds one block (and its nested blocks) with broadcasts hoisted."""

    def __init__(self, block: Block, kept: set[int] | None = None) -> None:
        self.block = block
        #: broadcasts left in place (an mse's terms: :mod:`tessera.lower.exact.msetable`)
        self.kept = kept or set()
        self.defs = {r: i for i in block.instrs for r in i.results}
        self.out: list[Instr] = []
        self.lifted: dict[tuple[Value, tuple[int, ...], tuple[int, ...]], Value] = {}
        self.subst: dict[Value, Value] = {}

    def run(self) -> None:
        for instr in self.block.instrs:
            instr.operands = [self.subst.get(v, v) for v in instr.operands]
            for region in instr.regions:
                for inner in region.blocks:
                    _substitute(inner, self.subst)
                    _Hoister(inner, self.kept).run()
            op = instr.op
            if isinstance(op, tile_compute.Broadcast) and id(instr) not in self.kept and \
                    self._computed(instr.operands[0]):
                self.subst[instr.results[0]] = self.lift(instr.operands[0], op.shape,
                                                         op.dims, instr)
                continue
            self.out.append(instr)
        self.block.instrs = _live(self.out)

    def _computed(self, v: Value) -> bool:
        d = self.defs.get(v)
        return d is not None and isinstance(d.op, (*_ELEMENTWISE, tile_compute.Full,
                                                   tile_compute.Broadcast))

    def lift(self, v: Value, shape: tuple[int, ...], dims: tuple[int, ...], at: Instr
             ) -> Value:
        """``broadcast(v)`` to ``shape`` along ``dims``, recomputed from ``v``'s sources."""
        key = (v, tuple(shape), tuple(dims))
        if key in self.lifted:
            return self.lifted[key]
        d = self.defs.get(v)
        t = v.type
        assert isinstance(t, TensorType)
        if t.rank == 0:  # a scalar is broadcast as it is: every thread holds it
            new = self.emit(tile_compute.Broadcast(tuple(shape), ()), [v], at)
        elif d is not None and isinstance(d.op, tile_compute.Full):
            new = self.emit(tile_compute.Full(tuple(shape), d.op.value, d.op.element), [], d)
        elif d is not None and isinstance(d.op, tile_compute.Broadcast):
            # broadcast(broadcast(s, dims0), dims) = broadcast(s, dims o dims0)
            inner = tuple(dims[k] for k in d.op.dims)
            new = self.lift(d.operands[0], shape, inner, at)
        elif d is not None and isinstance(d.op, _ELEMENTWISE):
            operands = [self.lift(u, shape, _dims_of(u, t, dims), at) if _tensor(u) else u
                        for u in d.operands]
            new = self.emit(d.op, operands, d)
        else:
            new = self.emit(tile_compute.Broadcast(tuple(shape), tuple(dims)), [v], at)
        self.lifted[key] = new
        return new

    def emit(self, op: Op, operands: Sequence[Value], like: Instr) -> Value:
        types = [u.type for u in operands]
        result_types = op.infer(types)
        op.verify(types, result_types)
        instr = Instr(op, list(operands), [], [], like.loc, self.block)
        instr.results = [Value(r, instr) for r in result_types]
        self.out.append(instr)
        self.defs[instr.results[0]] = instr  # a later lift composes with it
        return instr.results[0]


def _dims_of(u: Value, t: TensorType, dims: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast dims of an operand ``u`` of an elementwise op whose result type is
    ``t``: elementwise operands have the result's shape, so its dims."""
    assert isinstance(u.type, TensorType) and u.type.shape == t.shape
    return dims


def _substitute(block: Block, subst: dict[Value, Value]) -> None:
    for instr in block.instrs:
        instr.operands = [subst.get(v, v) for v in instr.operands]
        for region in instr.regions:
            for inner in region.blocks:
                _substitute(inner, subst)


def _live(instrs: list[Instr]) -> list[Instr]:
    """``instrs`` without the elementwise ops, fulls and broadcasts nothing uses."""
    removable = (*_ELEMENTWISE, tile_compute.Full, tile_compute.Broadcast)
    used: set[Value] = set()
    keep: list[Instr] = []
    for instr in reversed(instrs):
        if isinstance(instr.op, removable) and not any(r in used for r in instr.results):
            continue
        keep.append(instr)
        used.update(instr.operands)
        for region in instr.regions:
            for inner in region.blocks:
                used.update(v for i in walk(inner) for v in i.operands)
    return keep[::-1]


__all__ = ["hoist_broadcasts"]
