"""Fast-mode attention over key blocks: one pass with an online softmax, as
FlashAttention-2 computes it (Dao, "FlashAttention-2", 2023, Algorithm 1).

One ``tile.for`` over the key blocks carries, per query row, the running maximum ``m``,
the running sum ``l`` of ``exp(s - m)`` and the unnormalised output ``acc`` (all f32):

    m' = max(m, max_j s_j);  a = exp(m - m');  p_j = exp(s_j - m')
    l' = a l + sum_j p_j;    acc' = a acc + p V

and the result is ``acc / l``. Rescaling by ``a`` and dividing once at the end
reassociate the graph's arithmetic, so the kernel is generated only with
``mode="fast"``; its error is bounded by
:func:`tessera.ir.transforms.schedule.bounds.attention_bound` (docs/schedule.md, "The
fast-mode bound"). A row maximum of ``-inf`` (every key masked to ``-inf``) shifts by 0
instead, so its terms are 0 and the row ends ``0 / 0``, NaN, as the graph's softmax of
such a row is.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tessera.ir.core import Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.to_tile import edges
from tessera.ir.transforms.to_tile import ops as rules
from tessera.ir.transforms.to_tile.attention.keyblocks import (
    F32,
    KeyPlan,
    along_keys,
    block_scores,
    key_loop,
)
from tessera.ir.transforms.to_tile.matmul import check_matmul, round_product
from tessera.ir.types import TensorType
from tessera.numerics import storage_of
from tessera.numerics.policy.modifiers import product_accum

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter


def flash_applies(plan: KeyPlan, order: list[Instr]) -> bool:
    """Whether only casts lie between the softmax and ``P @ V`` (which commute with
    the normalisation moved after the product)."""
    if plan.pv is None:
        return False
    after = order[order.index(plan.softmax) + 1:order.index(plan.pv)]
    return all(isinstance(i.op, graph_ops.Cast) for i in after if i in plan.keyed)


def emit_flash(em: Emitter, plan: KeyPlan, streamed: set[Value], mems: dict[Value, Value],
               env: dict[Value, Value], users: dict[Value, list[Instr]],
               order: list[Instr]) -> Value:
    """This program's tile of ``P @ V`` by the online softmax (module docstring)."""
    sm, pv = plan.softmax, plan.pv
    assert pv is not None
    a, v = pv.operands
    check_matmul(em, pv)
    rows_t = em.tile_type(sm.results[0])
    out_t = em.tile_type(pv.results[0])
    lead = tuple(out_t.shape[:-2])
    m, n = (int(d) for d in out_t.shape[-2:])
    accum = product_accum(a.type.element, v.type.element)  # type: ignore[attr-defined]
    stat_t = TensorType(tuple(rows_t.shape[:-1]), F32)
    acc_t = TensorType((m, n), accum)

    def columns(x: Value) -> Value:
        """A row statistic as an (m, n) tile of the accumulator's shape."""
        (x,) = em.create(tc.Reshape((m,)), [x], pv)
        if storage_of(accum) != F32:
            (x,) = em.create(tc.Cast(accum), [x], pv)
        return em.create(tc.Broadcast((m, n), (0,)), [x], pv)[0]

    def step(carried: list[Value]) -> list[Value]:
        top, total, acc = carried
        s, local = block_scores(em, plan, streamed, mems, env, users, order, F32)
        (block_top,) = em.create(tc.Reduce("max", rows_t.rank - 1), [s], sm)
        (new_top,) = em.create(tc.Maximum(), [top, block_top], sm)
        ninf = em.full(stat_t, float("-inf"))
        (empty,) = em.create(tc.Eq(), [new_top, ninf], sm)
        (shift,) = em.create(tc.Where(), [empty, em.full(stat_t, 0.0), new_top], sm)
        (scale,) = em.create(tc.Exp(), [em.create(tc.Sub(), [top, shift], sm)[0]], sm)
        (p,) = em.create(tc.Exp(), [em.create(tc.Sub(), [s, along_keys(em, shift, s, sm)], sm)[0]],
                         sm)
        (block_sum,) = em.create(tc.Reduce("sum", rows_t.rank - 1), [p], sm)
        (total,) = em.create(tc.Mul(), [total, scale], sm)
        (total,) = em.create(tc.Add(), [total, block_sum], sm)
        element = sm.results[0].type.element  # type: ignore[attr-defined]
        if storage_of(element) != F32:  # the graph's P is rounded to its element
            (p,) = em.create(tc.Cast(element), [p], sm)
        local[sm.results[0]] = p
        for inner in order[order.index(sm) + 1:order.index(pv)]:
            if inner in plan.keyed and not rules.folded(inner, users.get(inner.results[0], [])):
                local[inner.results[0]] = rules.emit(
                    em, inner, [local.get(x, x) for x in inner.operands])
        block = edges.load(em, mems[v], v)
        ps = local[a]
        if lead:
            (ps,) = em.create(tc.Reshape((m, plan.block)), [ps], pv)
            (block,) = em.create(tc.Reshape((plan.block, n)), [block], pv)
        (acc,) = em.create(tc.Mul(), [acc, columns(scale)], pv)
        (acc,) = em.create(tc.Mma(accum), [ps, block, acc], pv)
        return [new_top, total, acc]

    inits = [em.full(stat_t, float("-inf")), em.full(stat_t, 0.0), em.full(acc_t, 0)]
    _, total, acc = key_loop(em, plan, inits, pv, step)
    (acc,) = em.create(tc.Div(), [acc, columns(total)], pv)
    return round_product(em, pv, acc, accum, tuple(out_t.shape) if lead else None,
                         wide=False)


__all__ = ["emit_flash", "flash_applies"]
