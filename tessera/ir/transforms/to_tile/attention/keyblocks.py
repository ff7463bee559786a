"""Attention whose key rows are longer than one program holds: exact passes over key
blocks inside one program per query tile (the ``two_pass`` strategy of the schedule).

For ``softmax(s) @ V`` with ``s`` the scores (``Q Kᵀ``, scaled, masked), the graph
interpreter computes, per query row, in float64: ``m = max(s)``, ``e = exp(s - m)``,
``t = RN64(sum e)`` (the exact sum rounded once), ``p = RN(e / t)`` to the softmax's
element, then ``P @ V`` as the exact sum rounded once. The kernel reproduces each value
with the scores recomputed for every key block (FlashAttention's recompute) in three
``tile.for`` loops over the key blocks:

1. the row maximum, carried as ``maximum(m, max(block))`` (a maximum is exact and its
   value does not depend on the order; NaNs propagate as the graph's ``max`` does);
2. the row sum, carried as an expansion of :data:`TERMS` float64 values whose exact sum
   is the exact sum of the blocks' terms so far. Each block's expansion is produced by
   exact ``tile.reduce`` sums over the block's terms and the carried values: the first
   is ``RN64`` of the new exact total, each next one ``RN64`` of what the previous ones
   leave. After the last block the first term is ``RN64`` of the whole row's exact sum,
   the graph's ``t``, whenever the carried expansion held the running sums exactly (see
   docs/schedule.md for when it does);
3. ``p = e / t`` rounded as the graph's softmax rounds it, the graph ops between the
   softmax and ``P @ V``, and an exact ``tile.mma`` accumulator carried across the key
   blocks, rounded once after the loop: the graph's ``matmul_rounded``.

A row softmax whose rows leave the kernel (with elementwise ops on them) is walked the
same way (:func:`emit_rows`): passes 1 and 2, then a pass that computes each block's
values and stores them. Key columns past the edge of a ragged last block are loaded as
zeros and their scores set to ``-inf``, so they add 0 to every sum and never win a
maximum.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tessera.ir.core import Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.schedule.space import IterationSpace
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.to_tile import edges
from tessera.ir.transforms.to_tile import ops as rules
from tessera.ir.transforms.to_tile.blocked import block_loop
from tessera.ir.transforms.to_tile.matmul import check_matmul, emit_matmul, round_product
from tessera.ir.types import TensorType
from tessera.numerics import DType, dtype, storage_of
from tessera.numerics.policy.modifiers import product_accum

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter

F64 = dtype("f64")
F32 = dtype("f32")
#: float64 terms of the carried row sum
TERMS = 3


@dataclasses.dataclass
class KeyPlan:
    """How one kernel's attention (or row softmax) is cut into key blocks."""

    loop: int            #: the key loop (the softmax axis)
    block: int           #: its tile: keys per block
    softmax: Instr
    pv: Instr | None     #: the matmul ``P @ V`` (None: a row softmax, stored per block)
    keyed: set[Instr]    #: every instruction computed per key block
    args: list[Value]    #: the kernel's operands read per key block


def keyed_along(v: Value, space: IterationSpace, loop: int) -> bool:
    """Whether one of the tensor ``v``'s dimensions is walked by ``loop``."""
    t = v.type
    return isinstance(t, TensorType) and any(space.loop_of.get((v, k)) == loop
                                             for k in range(t.rank))


def plan_of(instr: Instr, space: IterationSpace) -> KeyPlan | None:
    """The key-block plan of the scheduled kernel ``instr``, or None when it holds its
    rows whole (not ``two_pass``, or neither attention nor a row softmax whose rows
    leave the kernel as its results)."""
    op = instr.op
    if getattr(op, "reduction", None) != "two_pass":
        return None
    region = instr.regions[0].block
    softmaxes = [i for i in region.instrs if isinstance(i.op, graph_ops.Softmax)]
    if len(softmaxes) != 1:
        return None
    (sm,) = softmaxes
    out = sm.results[0]
    loop = space.loop_of.get((out, sm.op.axis % out.type.rank))  # type: ignore[attr-defined]
    rank = out.type.rank  # type: ignore[attr-defined]
    if loop is None or sm.op.axis % rank != rank - 1:  # type: ignore[attr-defined]
        return None
    block = edges.edge_tile(space.extents[loop], op.tile[loop])  # type: ignore[attr-defined]
    if block >= space.extents[loop] or block < 2 * TERMS - 1:
        return None
    keyed = {i for i in region.instrs
             if not i.op.terminator and any(keyed_along(r, space, loop) for r in i.results)}
    order = list(region.instrs)
    # (constants are read where they are used: a folded scalar, or made on the spot)
    before = set(region.args) | {r for i in order[:order.index(sm)] for r in i.results} | {
        r for i in order if isinstance(i.op, graph_ops.Constant) for r in i.results}
    for inner in order[order.index(sm) + 1:]:  # what the blocks read after the softmax
        if inner in keyed and any(v not in before and not keyed_along(v, space, loop)
                                  for v in inner.operands):
            return None
    args = [a for a in region.args if keyed_along(a, space, loop)]
    if loop not in space.contracted:  # a row softmax: its rows leave as results
        for inner in order:
            if inner not in keyed and not inner.op.terminator and \
                    any(keyed_along(v, space, loop) for v in inner.operands):
                return None
        return KeyPlan(loop, block, sm, None, keyed, args)
    pvs = [i for i in region.instrs if isinstance(i.op, graph_ops.MatMul)
           and i.operands[0] in {r for k in keyed for r in k.results}
           and space.loop_of.get((i.operands[0], i.operands[0].type.rank - 1)) == loop]
    if len(pvs) != 1 or pvs[0].operands[1] not in region.args:
        return None
    (pv,) = pvs
    # the rows must leave the key loop through P @ V alone: no other reduction over the
    # keys, no keyed result
    for inner in region.instrs:
        if inner is pv or inner in keyed:
            continue
        if any(keyed_along(v, space, loop) for v in inner.operands):
            return None
    return KeyPlan(loop, block, sm, pv, keyed | {pv}, args)


def key_loop(em: Emitter, plan: KeyPlan, inits: Sequence[Value], instr: Instr,
             body_fn: Callable[[list[Value]], list[Value]]) -> list[Value]:
    """A ``tile.for`` over the key blocks carrying ``inits``; inside, the key loop
    starts at the loop index."""
    return block_loop(em, plan.loop, plan.block, inits, instr, body_fn, "key")


def block_scores(em: Emitter, plan: KeyPlan, streamed: set[Value],
                 mems: dict[Value, Value], env: dict[Value, Value],
                 users: dict[Value, list[Instr]], order: list[Instr],
                 wide: DType = F64) -> tuple[Value, dict[Value, Value]]:
    """This key block's softmax input widened to ``wide`` (keys past the edge:
    ``-inf``), and the block's values by graph value."""
    local = dict(env)
    for arg in plan.args:
        if arg not in streamed:
            local[arg] = edges.load(em, mems[arg], arg)
    for inner in order:
        if inner is plan.softmax:
            break
        if inner not in plan.keyed or rules.folded(inner, users.get(inner.results[0], [])):
            continue
        if isinstance(inner.op, graph_ops.MatMul):
            local[inner.results[0]] = emit_matmul(em, inner, streamed, mems, local)
        else:
            args = [local.get(v, v) for v in inner.operands]
            local[inner.results[0]] = rules.emit(em, inner, args)
    sm = plan.softmax
    (w,) = em.create(tc.Cast(wide), [local[sm.operands[0]]], sm)
    extent = em.extents[plan.loop]
    if extent % plan.block:
        wt = w.type
        assert isinstance(wt, TensorType)
        inside = edges.axis_mask(em, em.starts[plan.loop], plan.block, extent, sm)
        (inside,) = em.create(tc.Broadcast(tuple(wt.shape), (wt.rank - 1,)), [inside], sm)
        (w,) = em.create(tc.Where(), [inside, w, em.full(wt, float("-inf"))], sm)
    return w, local


def along_keys(em: Emitter, r: Value, like: Value, instr: Instr) -> Value:
    """The row statistic ``r`` broadcast back over the key axis of ``like``."""
    t = like.type
    assert isinstance(t, TensorType)
    return em.create(tc.Broadcast(tuple(t.shape), tuple(range(t.rank - 1))), [r], instr)[0]


def _expansion(em: Emitter, e: Value, carried: Sequence[Value], instr: Instr) -> list[Value]:
    """The next carried row sum: ``TERMS`` f64 values, the first ``RN64`` of the exact
    sum of ``e``'s rows and ``carried``, each next ``RN64`` of what the earlier leave.
    Each is one exact ``tile.reduce`` over the block's terms beside the extra values
    (the block and a slab holding the extras, side by side)."""
    t = e.type
    assert isinstance(t, TensorType)
    shape, rank, width = tuple(t.shape), t.rank, int(t.shape[-1])
    wide = (*shape[:-1], 2, width)
    index = tile_ops.SCALAR_INDEX.element
    (slab,) = em.create(tile_ops.Arange(2), [], instr)
    (slab,) = em.create(tc.Broadcast(wide, (rank - 1,)), [slab], instr)
    (first,) = em.create(tc.Eq(), [slab, em.full(TensorType(wide, index), 0)], instr)
    spread = (*range(rank - 1), rank)
    (terms,) = em.create(tc.Broadcast(wide, spread), [e], instr)
    (col,) = em.create(tile_ops.Arange(width), [], instr)
    (col,) = em.create(tc.Broadcast(shape, (rank - 1,)), [col], instr)
    extras = list(carried)
    out: list[Value] = []
    for _ in range(TERMS):
        slots = em.full(t, 0.0)
        for j, x in enumerate(extras):
            (at,) = em.create(tc.Eq(), [col, em.full(TensorType(shape, index), j)], instr)
            (slots,) = em.create(tc.Where(), [at, along_keys(em, x, e, instr), slots], instr)
        (slots,) = em.create(tc.Broadcast(wide, spread), [slots], instr)
        (both,) = em.create(tc.Where(), [first, terms, slots], instr)
        (flat,) = em.create(tc.Reshape((*shape[:-1], 2 * width)), [both], instr)
        (s,) = em.create(tc.Reduce("sum", rank - 1, exact=True), [flat], instr)
        out.append(s)
        extras.append(em.create(tc.Neg(), [s], instr)[0])
    return out


Exponentials = Callable[[], tuple[Value, dict[Value, Value]]]


def _statistics(em: Emitter, plan: KeyPlan, streamed: set[Value], mems: dict[Value, Value],
                env: dict[Value, Value], users: dict[Value, list[Instr]],
                order: list[Instr]) -> tuple[Exponentials, Value]:
    """Passes 1 and 2: the rows' max and exact sum; and the block's ``exp(s - max)``."""
    sm = plan.softmax
    rows_t = em.tile_type(sm.results[0])
    stat_t = TensorType(tuple(rows_t.shape[:-1]), F64)

    def maximum(carried: list[Value]) -> list[Value]:
        w, _ = block_scores(em, plan, streamed, mems, env, users, order)
        (top,) = em.create(tc.Reduce("max", rows_t.rank - 1), [w], sm)
        return [em.create(tc.Maximum(), [carried[0], top], sm)[0]]

    (top,) = key_loop(em, plan, [em.full(stat_t, float("-inf"))], sm, maximum)

    def exponentials() -> tuple[Value, dict[Value, Value]]:
        w, local = block_scores(em, plan, streamed, mems, env, users, order)
        (shifted,) = em.create(tc.Sub(), [w, along_keys(em, top, w, sm)], sm)
        return em.create(tc.Exp(), [shifted], sm)[0], local

    def total(carried: list[Value]) -> list[Value]:
        e, _ = exponentials()
        return _expansion(em, e, carried, sm)

    zero = em.full(stat_t, 0.0)
    (row_sum, *_) = key_loop(em, plan, [zero] * TERMS, sm, total)
    return exponentials, row_sum


def _probabilities(em: Emitter, plan: KeyPlan, exponentials: Exponentials, row_sum: Value,
                   users: dict[Value, list[Instr]], order: list[Instr]) -> dict[Value, Value]:
    """Pass 3's block: ``p`` rounded as the graph's softmax, and the keyed graph ops
    after it (up to ``P @ V``), by graph value."""
    sm = plan.softmax
    e, local = exponentials()
    (p,) = em.create(tc.Div(), [e, along_keys(em, row_sum, e, sm)], sm)
    (p,) = em.create(tc.Cast(sm.results[0].type.element), [p], sm)  # type: ignore[attr-defined]
    local[sm.results[0]] = rules.settle(em, sm, p)
    for inner in order[order.index(sm) + 1:]:
        if inner is plan.pv:
            break
        if inner in plan.keyed and not rules.folded(inner, users.get(inner.results[0], [])):
            local[inner.results[0]] = rules.emit(
                em, inner, [local.get(x, x) for x in inner.operands])
    return local


def emit_rows(em: Emitter, plan: KeyPlan, streamed: set[Value], mems: dict[Value, Value],
              env: dict[Value, Value], users: dict[Value, list[Instr]], order: list[Instr],
              store: Callable[[dict[Value, Value]], None]) -> None:
    """A row softmax (and the graph ops on its rows) over row blocks: the max and exact
    sum passes, then a pass that computes each block's values and ``store``s those along
    the keys."""
    exponentials, row_sum = _statistics(em, plan, streamed, mems, env, users, order)

    def values(carried: list[Value]) -> list[Value]:
        local = _probabilities(em, plan, exponentials, row_sum, users, order)
        store({r: local[r] for i in plan.keyed for r in i.results if r in local})
        return []

    key_loop(em, plan, [], plan.softmax, values)


def emit_attention(em: Emitter, plan: KeyPlan, streamed: set[Value],
                   mems: dict[Value, Value], env: dict[Value, Value],
                   users: dict[Value, list[Instr]], order: list[Instr]) -> Value:
    """This program's tile of ``P @ V``, rounded as the graph rounds it, computed in
    three passes over the key blocks (module docstring)."""
    pv = plan.pv
    assert pv is not None
    a, v = pv.operands
    check_matmul(em, pv)
    if any(storage_of(x.type.element).kind != "float"  # type: ignore[attr-defined]
           or storage_of(x.type.element).bits > 32 for x in (a, v)):  # type: ignore[attr-defined]
        raise rules.refuse(pv, "attention over key blocks takes float operands of at "
                           "most 32 bits")
    exponentials, row_sum = _statistics(em, plan, streamed, mems, env, users, order)

    out_t = em.tile_type(pv.results[0])
    lead = tuple(out_t.shape[:-2])
    m, n = (int(d) for d in out_t.shape[-2:])
    accum = product_accum(a.type.element, v.type.element)  # type: ignore[attr-defined]
    acc_t = TensorType((m, n), accum)

    def matrix(x: Value, shape: tuple[int, int]) -> Value:
        return em.create(tc.Reshape(shape), [x], pv)[0] if lead else x

    def product(carried: list[Value]) -> list[Value]:
        local = _probabilities(em, plan, exponentials, row_sum, users, order)
        block = edges.load(em, mems[v], v)
        tiles = [matrix(local[a], (m, plan.block)), matrix(block, (plan.block, n))]
        return [em.create(tc.Mma(accum, True), [*tiles, carried[0]], pv)[0]]

    (acc,) = key_loop(em, plan, [em.full(acc_t, 0)], pv, product)
    # (the cast to the accumulator is the one rounding of the exact sum)
    return round_product(em, pv, acc, accum, tuple(out_t.shape) if lead else None)


__all__ = [
    "F32",
    "F64",
    "TERMS",
    "KeyPlan",
    "along_keys",
    "block_scores",
    "emit_attention",
    "emit_rows",
    "key_loop",
    "keyed_along",
    "plan_of",
]
