"""Reductions and softmax of a generated kernel, with the graph interpreter's bits.

A kernel holds every reduced loop whole (its tile is the loop's extent), so each
reduction finishes inside one program (the ``in_tile`` strategy). Why each rule gives
the graph's bits:

* ``sum`` / ``mean`` of floats: the graph rounds the exact sum (divided by the count)
  once; so does the exact ``tile.reduce`` (``exact = true``), whatever the order of its
  terms, and both give the default NaN. Integer sums are computed in int64 (exact for
  formats of at most 32 bits) and cast back, which saturates as the graph does;
* ``max`` / ``min``: the result is an element; the graph makes it independent of the
  order (IEEE 754-2019 ``maximum``: +0 above -0, the default NaN), while the tile level
  returns the zero or NaN NumPy meets first. A second reduction of ``1 / x`` over the
  zeros (``+inf`` for +0, ``-inf`` for -0) says which zero the graph returns;
* ``softmax``: the graph computes ``exp(x - max)`` in float64, divides it by the
  correctly rounded float64 sum of those terms and rounds once. The kernel does the
  same arithmetic on f64 tiles (the tile level's f64 ``exp`` is the same specified
  ``exp_f64_specified``, its ``-`` and ``/`` are IEEE float64, its exact reduction
  rounds to f64), then casts once.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tessera.ir.core import Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects.tile import compute as tc
from tessera.ir.transforms.to_tile import blocked
from tessera.ir.transforms.to_tile import ops as rules
from tessera.ir.types import TensorType
from tessera.numerics import dtype, storage_of

if TYPE_CHECKING:
    from tessera.ir.transforms.to_tile.kernel import Emitter

F64 = dtype("f64")


def _type(v: Value) -> TensorType:
    t = v.type
    assert isinstance(t, TensorType)
    return t


def _merged(em: Emitter, instr: Instr, x: Value, axes: tuple[int, ...]) -> tuple[Value, int]:
    """``x`` with its reduced ``axes`` (consecutive) merged into one, and that axis."""
    t = _type(x)
    if list(axes) != list(range(axes[0], axes[0] + len(axes))):
        raise rules.refuse(instr, f"it reduces the axes {list(axes)}, which are not "
                           "consecutive", hint="transpose the reduced axes next to each "
                           "other, or run with backend='interp'")
    if len(axes) == 1:
        return x, axes[0]
    first = axes[0]
    shape = (*t.shape[:first], math.prod(t.shape[a] for a in axes), *t.shape[axes[-1] + 1:])
    return em.create(tc.Reshape(tuple(shape)), [x], instr)[0], first


def _finish(em: Emitter, instr: Instr, r: Value) -> Value:
    """The reduced tile in the shape of the graph result's tile (``keepdims`` axes)."""
    shape = tuple(em.tile_type(instr.results[0]).shape)
    if tuple(_type(r).shape) != shape:
        (r,) = em.create(tc.Reshape(shape), [r], instr)
    return r


@rules.rule(graph_ops.Sum, graph_ops.Mean)
def _sum(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    (x,) = args
    src, out = storage_of(_type(x).element), storage_of(_type(instr.results[0]).element)
    axes = instr.op.reduced_axes(_type(x).rank)  # type: ignore[attr-defined]
    if not axes or any(_type(x).shape[a] == 0 for a in axes):
        raise rules.refuse(instr, "a reduction over no axis or an empty one")
    is_mean = isinstance(instr.op, graph_ops.Mean)
    if src.kind == "int" and not is_mean:
        def int_sum(wide: list[Value]) -> Value:
            flat, axis = _merged(em, instr, wide[0], axes)
            return em.create(tc.Reduce("sum", axis), [flat], instr)[0]
        return _finish(em, instr, rules.in_int64(em, instr, args, int_sum))
    if src.kind != "float" or src != out:
        raise rules.refuse(instr, f"a {'mean' if is_mean else 'sum'} of {src} values "
                           f"into {out}")
    x = blocked.zero_outside(em, instr.operands[0], x, instr)
    flat, axis = _merged(em, instr, x, axes)
    acc = blocked.exact_reduce(em, instr, flat, axis)
    if acc is not None:  # a block of a carried reduction: finished after the loop
        return acc
    (r,) = em.create(tc.Reduce("mean" if is_mean else "sum", axis, exact=True), [flat], instr)
    return _finish(em, instr, r)


@rules.rule(graph_ops.Max, graph_ops.Min)
def _extreme(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    (x,) = args
    t = _type(x)
    kind = "max" if isinstance(instr.op, graph_ops.Max) else "min"
    axes = instr.op.reduced_axes(t.rank)  # type: ignore[attr-defined]
    if not axes or any(t.shape[a] == 0 for a in axes):
        raise rules.refuse(instr, "a reduction over no axis or an empty one")
    flat, axis = _merged(em, instr, x, axes)
    (r,) = em.create(tc.Reduce(kind, axis), [flat], instr)
    if storage_of(t.element).kind != "float":
        return _finish(em, instr, r)
    # which zero: 1/x over the zeros is +inf for +0 and -inf for -0
    ft, rt = _type(flat), _type(r)
    zero, one = em.full(ft, 0.0), em.full(ft, 1.0)
    (is_zero,) = em.create(tc.Eq(), [flat, zero], instr)
    (safe,) = em.create(tc.Where(), [is_zero, flat, one], instr)
    (recip,) = em.create(tc.Div(), [one, safe], instr)
    away = em.full(ft, -math.inf if kind == "max" else math.inf)
    (signs,) = em.create(tc.Where(), [is_zero, recip, away], instr)
    (which,) = em.create(tc.Reduce(kind, axis), [signs], instr)
    rzero = em.full(rt, 0.0)
    (found,) = em.create(tc.Gt() if kind == "max" else tc.Lt(), [which, rzero], instr)
    pos, neg = (rzero, em.full(rt, -0.0)) if kind == "max" else (em.full(rt, -0.0), rzero)
    (signed,) = em.create(tc.Where(), [found, pos, neg], instr)
    (r_zero,) = em.create(tc.Eq(), [r, rzero], instr)
    (r,) = em.create(tc.Where(), [r_zero, signed, r], instr)
    return _finish(em, instr, rules.settle(em, instr, r))


def _along(em: Emitter, instr: Instr, r: Value, like: TensorType, axis: int) -> Value:
    """The row statistic ``r`` (``axis`` reduced away) broadcast back over ``axis``."""
    dims = tuple(k for k in range(like.rank) if k != axis)
    return em.create(tc.Broadcast(tuple(like.shape), dims), [r], instr)[0]


@rules.rule(graph_ops.Softmax)
def _softmax(em: Emitter, instr: Instr, args: list[Value]) -> Value:
    (x,) = args
    t = _type(x)
    if storage_of(t.element).kind != "float" or t.rank == 0:
        raise rules.refuse(instr, f"a softmax of a {t}")
    axis = instr.op.axis % t.rank  # type: ignore[attr-defined]
    (w,) = em.create(tc.Cast(F64), [x], instr)
    wt = _type(w)
    (top,) = em.create(tc.Reduce("max", axis), [w], instr)
    (shifted,) = em.create(tc.Sub(), [w, _along(em, instr, top, wt, axis)], instr)
    (e,) = em.create(tc.Exp(), [shifted], instr)
    (total,) = em.create(tc.Reduce("sum", axis, exact=True), [e], instr)
    (p,) = em.create(tc.Div(), [e, _along(em, instr, total, wt, axis)], instr)
    (out,) = em.create(tc.Cast(_type(instr.results[0]).element), [p], instr)
    return rules.settle(em, instr, out)


__all__ = ["F64"]
