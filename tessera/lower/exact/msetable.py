"""The table of a mean squared error's terms, lowered without building it.

The tile kernel of ``graph.mse`` (:mod:`tessera.ir.transforms.to_tile.loss`) puts the
ten f64 square terms of each of its ``n`` elements into the columns of an ``(n, 16)``
table, ``where(column_k, broadcast(term_k), ...)`` over a table of zeros, reshapes it to
one row and takes the row's exact mean (``tile.reduce {exact, to}``). Held in
registers, the table is ``16 n`` f64 values, 64 per thread for ``n = 512``: more than
the register file. Its exact mean is the exact sum of the ten term tiles divided by
``16 n`` whenever the columns put every term into exactly one place, so the lowering
deposits the ``(n,)`` term tiles into the long accumulator directly
(:func:`tessera.lower.exact.reduce.exact_row_sums`) and emits nothing for the table,
its column selectors or the reshape: :func:`plan` gives them rules that only record
the terms (:class:`MseTable`) after checking, by evaluating the selectors (constants of
the kernel) with the tile interpreter, that each is one whole column and no two are
the same. :func:`term_broadcasts` keeps the broadcast hoisting
(:mod:`tessera.lower.hoist`) from recomputing the terms at the table's shape.

The terms are multiples of 2**-294 below 2**263 (:func:`mse_terms`), which the
accumulator of :data:`tessera.lower.exact.sum64.MSE_QUANTUM` holds exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.ir.core import Block, Instr, Value, uses, walk
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.lower.core import Lowerer
from tessera.lower.values import Dist, Lowered, storage_name

#: operand formats whose mse terms the accumulator holds
FORMATS = ("float32", "bfloat16", "float16")
#: the ops between a mean squared error's operands and its terms (TwoSum, Veltkamp's
#: split, the products, the non-finite test, and broadcasts hoisted to the operands)
_TERM_OPS = (tile_compute.Add, tile_compute.Sub, tile_compute.Mul, tile_compute.Neg,
             tile_compute.Eq, tile_compute.Where, tile_compute.Broadcast)
#: the ops that draw the column selectors (from constants only)
_SELECTOR_OPS = (tile_compute.CausalMask, tile_compute.Broadcast, tile_compute.Eq,
                 tile_compute.Not, tile_compute.And, tile_compute.Full, tile_ops.Constant)


@dataclass
class MseTable:
    """The lowered stand-in of a table (or a value that only builds one): the term
    tiles placed so far, each a register tile of ``(n,)``."""

    terms: list[Dist] = field(default_factory=list)


def _made_by(v: Value, kind: type | tuple[type, ...]) -> Instr | None:
    owner = v.owner
    return owner if isinstance(owner, Instr) and isinstance(owner.op, kind) else None


def _chain(src: Value) -> tuple[Instr, list[Instr], Instr] | None:
    """The reshape, the wheres (last first) and the zero table of ``src``, or None."""
    reshape = _made_by(src, tile_compute.Reshape)
    v = reshape.operands[0] if reshape else None
    wheres = []
    while v is not None and (where := _made_by(v, tile_compute.Where)) is not None:
        wheres.append(where)
        v = where.operands[2]
    full = v is not None and _made_by(v, tile_compute.Full)
    if reshape is None or not wheres or not full or full.op.value != 0:  # type: ignore[attr-defined]
        return None
    return reshape, wheres, full


def mse_terms(src: Value) -> bool:
    """Whether ``src`` is the table of a mean squared error's f64 terms:
    ``reshape(where(c, broadcast(t), ... full(0)))`` with every term ``t`` (or ``t``
    computed at the table's shape) a product computed by TwoSum and Veltkamp's split
    from operands cast to f64 from f32, bf16 or f16, and constants. Such operands (times
    4) are multiples of 2**-147 below 2**130, so every term is a whole number of quanta
    2**-294 below 2**263."""
    chain = _chain(src)
    if chain is None:
        return False
    terms = []
    for where in chain[1]:
        term = where.operands[1]
        bcast = _made_by(term, tile_compute.Broadcast)
        term = bcast.operands[0] if bcast else term
        if _made_by(term, tile_compute.Mul) is None:
            return False
        terms.append(term)
    seen: set[int] = set()
    while terms:
        owner = terms.pop().owner
        if not isinstance(owner, Instr) or id(owner) in seen:
            continue
        seen.add(id(owner))
        if isinstance(owner.op, (tile_compute.Full, tile_ops.Constant)):
            continue
        if isinstance(owner.op, tile_compute.Cast):
            t = owner.operands[0].type
            if not isinstance(t, TensorType) or storage_name(t.element) not in FORMATS:
                return False
            continue
        if not isinstance(owner.op, _TERM_OPS):
            return False
        terms.extend(owner.operands)
    return True


def _exact_reduces(block: Block) -> list[Instr]:
    return [i for i in block.instrs if isinstance(i.op, tile_compute.Reduce) and
            i.op.exact and mse_terms(i.operands[0])]


def term_broadcasts(block: Block) -> set[int]:
    """The ``id`` of each broadcast that places a term tile into a table of ``block``
    or a block nested in it: left as they are by the hoisting, so the terms are
    computed at ``(n,)``."""
    out = set()
    for red in (r for inner in _blocks(block) for r in _exact_reduces(inner)):
        chain = _chain(red.operands[0])
        assert chain is not None
        for where in chain[1]:
            bcast = _made_by(where.operands[1], tile_compute.Broadcast)
            if bcast is not None:
                out.add(id(bcast))
    return out


def _blocks(block: Block) -> list[Block]:
    """``block`` and the blocks nested in it."""
    return [block, *(inner for i in walk(block) for region in i.regions
                     for inner in region.blocks)]


def plan(low: Lowerer) -> None:
    """Give the tables of ``low``'s kernel (exact means of mse terms, or carried exact
    sums of a block of them, whose terms are ``(n,)`` tiles and whose selectors are
    whole distinct columns, in any block) rules that emit nothing: the reduction
    deposits the recorded terms."""
    users = uses(low.fn.body)
    for block in _blocks(low.fn.body):
        _plan_block(low, block, users)


def _plan_block(low: Lowerer, block: Block, users: dict[Value, list[Instr]]) -> None:
    """:func:`plan` for the tables of one block."""
    for red in _exact_reduces(block):
        chain = _chain(red.operands[0])
        assert chain is not None
        reshape, wheres, full = chain
        bcasts = [_made_by(w.operands[1], tile_compute.Broadcast) for w in wheres]
        if any(b is None or b.operands[0].type.rank != 1 for b in bcasts):  # type: ignore[union-attr]
            continue
        table = {id(i) for i in [reshape, *wheres, full, *bcasts]}  # type: ignore[list-item]
        selectors = _selectors(block, users, [w.operands[0] for w in wheres], table)
        if selectors is None or not _distinct_columns([w.operands[0] for w in wheres]):
            continue
        inside = table | {id(i) for i in selectors}
        if any(u is not red for u in users.get(reshape.results[0], [])) or any(
                id(u) not in inside for i in [*wheres, full, *bcasts]
                for r in i.results for u in users.get(r, [])):  # type: ignore[union-attr]
            continue  # a part of the table other code reads: lowered as usual
        for i in [reshape, *wheres, full, *selectors]:
            low.overrides[id(i)] = _table_rule
        for b in bcasts:
            low.overrides[id(b)] = _term_rule
        _unbroadcast(low, [b.operands[0] for b in bcasts],  # type: ignore[union-attr]
                     tuple(full.results[0].type.shape))  # type: ignore[attr-defined]


def _unbroadcast(low: Lowerer, terms: list[Value], shape: tuple[int, ...]) -> None:
    """Hold the terms, and what they are computed from, in the blocked layout of their
    own shape: the layouts gave them the table's rows (:class:`~tessera.lower.layout.BRow`,
    each row's value in every thread that holds a part of it) for the broadcasts that
    no longer move them. The terms flatten the operands' tiles, which leaves every
    element in its thread (:mod:`tessera.lower.exact.flatten`)."""
    from tessera.lower.exact.flatten import flattening, narrow, source_width
    from tessera.lower.layout import BRow, blocked

    seen: set[Value] = set()
    todo = list(terms)
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        layout = low.layouts.get(v)
        if isinstance(layout, BRow) and tuple(layout.parent.shape) == shape:
            low.layouts[v] = blocked(tuple(v.type.shape))  # type: ignore[attr-defined]
        if isinstance(v.owner, Instr):
            todo.extend(v.owner.operands)
    n = tuple(terms[0].type.shape) if terms else ()  # type: ignore[attr-defined]
    flat = [v for v in seen if tuple(getattr(v.type, "shape", ())) == n]
    reshapes = [r for r in map(flattening, flat) if r is not None]
    narrow(low, set(flat), reshapes, source_width(low, reshapes))


def _selectors(block: Block, users: dict[Value, list[Instr]], conds: list[Value],
               table: set[int]) -> list[Instr] | None:
    """The instructions that compute ``conds`` (in block order), when they are built
    from constants by the selector ops alone and used by nothing but the table."""
    cone: dict[int, Instr] = {}
    todo = [v.owner for v in conds]
    while todo:
        owner = todo.pop()
        if not isinstance(owner, Instr) or id(owner) in cone or id(owner) in table:
            continue
        if not isinstance(owner.op, _SELECTOR_OPS) or owner.regions:
            return None
        cone[id(owner)] = owner
        todo.extend(v.owner for v in owner.operands)
    inside = set(cone) | table
    grown = True
    while grown:  # selectors drawn but never placed (the kernel draws 16 columns)
        grown = False
        for i in reversed(block.instrs):
            if id(i) not in inside and isinstance(i.op, _SELECTOR_OPS) and not i.regions \
                    and any(id(v.owner) in cone for v in i.operands) and all(
                        id(u) in inside for r in i.results for u in users.get(r, [])):
                cone[id(i)] = i
                inside.add(id(i))
                grown = True
    if any(id(u) not in inside for i in cone.values() for r in i.results
           for u in users.get(r, [])):
        return None  # a selector (or a constant) other code uses: lowered as usual
    return [i for i in block.instrs if id(i) in cone]


def _distinct_columns(conds: list[Value]) -> bool:
    """Whether each of ``conds`` (computed from constants by the selector ops) is true
    on exactly one whole column, no two alike."""
    from tessera.interp.tile.rules import IMPLS

    values: dict[Value, Any] = {}

    def value(v: Value) -> Any:
        if v not in values:
            instr = v.owner
            assert isinstance(instr, Instr)
            impl = IMPLS[type(instr.op)](instr, False)
            values[v] = impl(*[value(u) for u in instr.operands])
        return values[v]

    columns = set()
    for c in conds:
        m = np.asarray(value(c), dtype=bool)
        hit = np.flatnonzero(m.all(axis=0))
        if m.ndim != 2 or len(hit) != 1 or m.sum() != m.shape[0]:
            return False
        columns.add(int(hit[0]))
    return len(columns) == len(conds)


def _table_rule(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Any]:
    """A table, a selector or a constant of one: a :class:`MseTable` of the terms placed
    (a ``where`` adds its term to its operand's)."""
    if isinstance(instr.op, tile_compute.Where):
        before = args[2] if isinstance(args[2], MseTable) else MseTable()
        return [MseTable([*before.terms, args[1]])]  # type: ignore[list-item]
    if isinstance(instr.op, tile_compute.Reshape):
        return [args[0]]
    return [MseTable() for _ in instr.results]


def _term_rule(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """A term's broadcast into the table: the ``(n,)`` term tile itself."""
    return [args[0]]


__all__ = ["FORMATS", "MseTable", "mse_terms", "plan", "term_broadcasts"]
