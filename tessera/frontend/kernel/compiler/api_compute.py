"""Lowering of the ``ts.tile.*`` compute calls to Tile IR.

``mma(a, b, accumulator=)`` takes the accumulation format (``accumulator=ts.f32``, the
default is the policy's accumulator of ``a``, f32 for bf16) or an accumulator tile to
add to (``mma(a, b, acc)`` = ``acc + a @ b``, accumulated as one chain);
``exact=True`` makes the result an exact accumulator, rounded once where it is used.
Unary math of integer tiles computes in f32 (``abs`` keeps the integer format);
reductions need a constant axis; ``row_sum``/``reduce_sum`` take ``exact=True`` (the
exact sum rounded once), and ``reduce_mean`` is always exact; ``acc=`` continues an
exact sum across blocks (``count=``: a mean's whole length). Each rule registers in
``API_RULES`` with its parameters.
"""

from __future__ import annotations

import ast
import functools
from typing import Any

from tessera.frontend.kernel.compiler.api import element_arg, shape_arg
from tessera.frontend.kernel.compiler.rules import api_rule
from tessera.frontend.kernel.compiler.state import F32, CompileState, is_value, kind_of
from tessera.ir.core import Value
from tessera.ir.dialects.tile import BOOL, MemRefType
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.types import TensorType
from tessera.numerics import accum_of


def _flag(state: CompileState, node: ast.AST, name: str, value: Any) -> bool:
    if is_value(value) or not isinstance(value, bool):
        raise state.error(f"{name}= must be a constant True or False", node)
    return value


@api_rule("mma", params=("a", "b", "accumulator", "exact"),
          defaults={"accumulator": None, "exact": False})
def _mma(state: CompileState, node: ast.AST, a: Any, b: Any, accumulator: Any,
         exact: Any) -> Value:
    ta, tb = state.as_tile(a, node), state.as_tile(b, node)
    acc_tile = None
    if is_value(accumulator):
        acc_tile = state.as_tile(accumulator, node)
        acc = acc_tile.type.element  # type: ignore[attr-defined]
    elif accumulator is None:
        acc = accum_of(ta.type.element)  # type: ignore[attr-defined]
    else:
        acc = element_arg(state, accumulator, node)
    operands = [ta, tb] + ([acc_tile] if acc_tile is not None else [])
    return state.emit1(tile_compute.Mma(acc, _flag(state, node, "exact", exact)), operands,
                       node)


@api_rule("zeros", params=("shape", "dtype"), defaults={"dtype": None})
def _zeros(state: CompileState, node: ast.AST, shape: Any, dtype: Any) -> Value:
    elem = element_arg(state, dtype, node)
    zero = {"float": 0.0, "bool": False}.get(kind_of(elem), 0)
    return state.emit1(tile_compute.Full(shape_arg(state, shape, node), zero, elem), [], node)


@api_rule("full", params=("shape", "value", "dtype"), defaults={"dtype": None})
def _full(state: CompileState, node: ast.AST, shape: Any, value: Any, dtype: Any) -> Value:
    if is_value(value):
        v = state.as_tile(value, node)
        cast = state.cast(v, element_arg(state, dtype, node, v.type.element), node)
        return state.broadcast(cast, shape_arg(state, shape, node), node)
    elem = element_arg(state, dtype, node)
    if kind_of(elem) == "float":
        value = float(value)
    elif kind_of(elem) == "bool":
        value = bool(value)
    else:
        value = int(value)
    return state.emit1(tile_compute.Full(shape_arg(state, shape, node), value, elem), [], node)


def _unary(state: CompileState, node: ast.AST, x: Any, cls: Any) -> Value:
    v = state.as_tile(x, node)
    if kind_of(v.type.element) != "float" and cls is not tile_compute.Abs:  # type: ignore
        v = state.cast(v, F32, node)
    return state.emit1(cls(), [v], node)


#: the unary ``ts.tile`` functions and their ops (one rule each, ``(x)``)
UNARY = {
    "exp": tile_compute.Exp,
    "log": tile_compute.Log,
    "sqrt": tile_compute.Sqrt,
    "abs": tile_compute.Abs,
    "tanh": tile_compute.Tanh,
    "erf": tile_compute.Erf,
}
for _name, _cls in UNARY.items():
    api_rule(_name, params=("x",))(functools.partial(_unary, cls=_cls))


@api_rule("maximum", params=("a", "b"))
def _maximum(state: CompileState, node: ast.AST, a: Any, b: Any) -> Value:
    return state.emit1(tile_compute.Maximum(), list(state.unify(a, b, node)), node)


@api_rule("minimum", params=("a", "b"))
def _minimum(state: CompileState, node: ast.AST, a: Any, b: Any) -> Value:
    return state.emit1(tile_compute.Minimum(), list(state.unify(a, b, node)), node)


@api_rule("where", params=("cond", "a", "b"))
def _where(state: CompileState, node: ast.AST, cond: Any, a: Any, b: Any) -> Value:
    va, vb = state.unify(a, b, node)
    c = state.as_tile(cond, node)
    if kind_of(c.type.element) != "bool":  # type: ignore[attr-defined]
        c = state.cast(c, BOOL, node)
    c, va = state.broadcast_pair(c, va, node)
    c, vb = state.broadcast_pair(c, vb, node)
    va, vb = state.broadcast_pair(va, vb, node)
    return state.emit1(tile_compute.Where(), [c, va, vb], node)


def _reduce(state: CompileState, node: ast.AST, x: Any, axis: Any, kind: str,
            exact: Any = False, acc: Any = None, count: Any = None) -> Value:
    v = state.as_tile(x, node)
    if v.type.rank == 0 or is_value(axis):  # type: ignore[attr-defined]
        raise state.error(f"{kind} reductions need a tile of rank >= 1 and a constant "
                          "axis", node)
    exact = _flag(state, node, "exact", exact) or kind == "mean"
    if exact and kind_of(v.type.element) != "float":  # type: ignore[attr-defined]
        if kind == "mean":
            raise state.error(f"reduce_mean needs a float tile, not "
                              f"{v.type.element}: cast it first", node)  # type: ignore
        exact = False  # integer sums are exact already
    if acc is None:
        if count is not None:
            raise state.error("count= is the length of a mean that continues an "
                              "accumulator: give acc= too", node)
        return state.emit1(tile_compute.Reduce(kind, int(axis), exact), [v], node)
    # a carried exact sum: continue the accumulator ``acc`` (see tile.reduce)
    if not exact or not is_value(acc):
        raise state.error("acc= continues an exact sum: pass exact=True and the running "
                          "accumulator tile (start it from ts.tile.zeros)", node)
    if kind == "mean" and (is_value(count) or not isinstance(count, int) or count < 1):
        raise state.error("a mean that continues an accumulator needs count=, the constant "
                          "number of terms of the whole row", node)
    op = tile_compute.Reduce(kind, int(axis), True, count=count if kind == "mean" else 0)
    return state.emit1(op, [v, state.as_tile(acc, node)], node)


api_rule("row_max", params=("x",))(functools.partial(_reduce, axis=-1, kind="max"))
api_rule("row_sum", params=("x", "exact", "acc"), defaults={"exact": False, "acc": None})(
    functools.partial(_reduce, axis=-1, kind="sum"))
for _name, _kind in {"reduce_max": "max", "reduce_min": "min"}.items():
    api_rule(_name, params=("x", "axis"), defaults={"axis": -1})(
        functools.partial(_reduce, kind=_kind))
api_rule("reduce_sum", params=("x", "axis", "exact", "acc"),
         defaults={"axis": -1, "exact": False, "acc": None})(
    functools.partial(_reduce, kind="sum"))
api_rule("reduce_mean", params=("x", "axis", "acc", "count"),
         defaults={"axis": -1, "acc": None, "count": None})(
    functools.partial(_reduce, kind="mean"))


@api_rule("causal_mask", params=("scores", "q_start", "k_start"))
def _causal_mask(state: CompileState, node: ast.AST, scores: Any, q_start: Any,
                 k_start: Any) -> Value:
    s = state.as_tile(scores, node)
    return state.emit1(tile_compute.CausalMask(), [s, state.as_index(q_start, node),
                                        state.as_index(k_start, node)], node)


@api_rule("cast", params=("x", "dtype"))
def _cast(state: CompileState, node: ast.AST, x: Any, dtype: Any) -> Value:
    v = state.as_tile(x, node)
    to = element_arg(state, dtype, node)
    t = v.type
    assert isinstance(t, TensorType) and not isinstance(t, MemRefType)
    if t.element == to and kind_of(to) != "float":
        return v
    # an explicit cast to the same float format is kept: it rounds a wide (exactly
    # accumulated) mma result to the format, as the docs promise
    return state.emit1(tile_compute.Cast(to), [v], node) if kind_of(to) != "bool" else \
        state.cast(v, to, node)


__all__ = ["UNARY"]
