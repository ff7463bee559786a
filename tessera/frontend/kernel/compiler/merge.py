"""Variables at control-flow joins: the one type a merged or loop-carried variable has.

A variable assigned differently on the two paths of a runtime ``if``, or at the start
and the end of a loop body, becomes one SSA value (a result of ``tile.if``, a region
argument of ``tile.for``/``tile.while``). Its type is the *join* of the paths' types:
the promoted element and the broadcast shape, when one path's shape contains the
other's; a Python number adopts the element of the tile it meets (weak typing). Each
path's value is then *coerced* to the joined type where it is yielded.
"""

from __future__ import annotations

import ast
from typing import Any

import numpy as np

from tessera.frontend.kernel.compiler.state import (
    F32,
    CompileState,
    is_mem,
    is_tile,
    is_value,
    kind_of,
)
from tessera.ir.core import Type, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import INDEX, MemRefType
from tessera.ir.types import TensorType
from tessera.numerics import promote, storage_of


def type_of(state: CompileState, x: Any, node: ast.AST, other: Any = None) -> Type:
    """The IR type a variable's value takes at a join (``other``: the other path's value)."""
    if is_value(x):
        if is_mem(x) and not x.type.shape:  # type: ignore[attr-defined]
            return TensorType((), x.type.element)  # type: ignore[attr-defined]
        return x.type
    like = other.type.element if is_tile(other) else None  # type: ignore[attr-defined]
    if isinstance(x, (bool, int, float)) or hasattr(x, "dtype"):
        return materialise_type(x, like)
    raise state.error(f"a variable holding {type(x).__name__} {x!r} changes in control flow "
                      "that depends on kernel values", node, hint="only tiles, scalars "
                      "and memory can change inside runtime loops and branches")


def materialise_type(x: Any, like: Any) -> Type:
    """The scalar type of a Python number next to a tile of element ``like`` (weak typing)."""
    if isinstance(x, bool):
        return TensorType((), tile_ir.BOOL)
    if isinstance(x, int):
        return TensorType((), like if like is not None and
                          kind_of(like) in ("int", "float") else INDEX)
    return TensorType((), like if like is not None and kind_of(like) == "float"
                      else F32)


def join(state: CompileState, a: Type, b: Type, node: ast.AST, name: str) -> Type:
    """The one type of variable ``name``, ``a`` on one path and ``b`` on another."""
    if a == b:
        return a
    if isinstance(a, TensorType) and isinstance(b, TensorType):
        ea, eb = a.element, b.element
        elem = ea if storage_of(ea) == storage_of(eb) else promote(storage_of(ea),
                                                                   storage_of(eb))
        try:
            shape = tuple(int(d) for d in np.broadcast_shapes(a.shape, b.shape))
        except ValueError:
            shape = None
        if shape is not None and (shape == a.shape or shape == b.shape):
            return TensorType(shape, elem)
    raise state.error(f"variable '{name}' is {a} on one path and {b} on another", node,
                      hint="give it the same shape (and memory) on every path; start "
                           "accumulators with ts.tile.zeros((...))")


def coerce(state: CompileState, x: Any, t: Type, node: ast.AST) -> Value:
    """``x`` as a value of type ``t`` in the current block."""
    if isinstance(t, MemRefType):
        return x
    assert isinstance(t, TensorType)
    v = state.as_tile(x, node, t.element)
    v = state.cast(v, t.element, node)
    if v.type.shape != t.shape:  # type: ignore[attr-defined]
        v = state.broadcast(v, t.shape, node)
    return v



__all__ = ["coerce", "join", "materialise_type", "type_of"]
