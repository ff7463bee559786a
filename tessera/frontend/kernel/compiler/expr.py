"""Expressions of kernel bodies: constants fold, everything else becomes Tile IR.

A Python expression over compile-time values (numbers, tuples, dtypes, ``math``,
specialisation constants such as ``is_causal``) is evaluated by Python while
compiling. An expression touching a tile, a scalar of the kernel or memory becomes
Tile IR. Subscripting memory gives a *view* (like a NumPy basic slice, it sees later
writes); a view is loaded when it is used as a value, and assigning a single element
(``x = A[i]``) loads it at once.
"""

from __future__ import annotations

import ast
import builtins
import math
import operator
import types
from typing import Any

from tessera.frontend.kernel.compiler.rules import expr, expr_rule, tile_call
from tessera.frontend.kernel.compiler.scope import EXTENTS, ORIGINS, TileContext, Undefined
from tessera.frontend.kernel.compiler.state import F32, CompileState, is_value, kind_of
from tessera.frontend.kernel.errors import UndefinedNameError
from tessera.ir.core import Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import INDEX
from tessera.ir.dialects.tile import compute as tile_compute

_BINOPS: dict[type, Any] = {
    ast.Add: (operator.add, tile_compute.Add),
    ast.Sub: (operator.sub, tile_compute.Sub),
    ast.Mult: (operator.mul, tile_compute.Mul),
    ast.Div: (operator.truediv, tile_compute.Div),
    ast.FloorDiv: (operator.floordiv, tile_compute.FloorDiv),
    ast.Mod: (operator.mod, tile_compute.Mod),
    ast.Pow: (operator.pow, tile_compute.Pow),
    ast.BitAnd: (operator.and_, tile_compute.And),
    ast.BitOr: (operator.or_, tile_compute.Or),
    ast.MatMult: (operator.matmul, None),
    ast.LShift: (operator.lshift, None),
    ast.RShift: (operator.rshift, None),
    ast.BitXor: (operator.xor, None),
}
_COMPARES: dict[type, Any] = {
    ast.Lt: (operator.lt, tile_compute.Lt),
    ast.LtE: (operator.le, tile_compute.Le),
    ast.Gt: (operator.gt, tile_compute.Gt),
    ast.GtE: (operator.ge, tile_compute.Ge),
    ast.Eq: (operator.eq, tile_compute.Eq),
    ast.NotEq: (operator.ne, tile_compute.Ne),
    ast.Is: (operator.is_, None),
    ast.IsNot: (operator.is_not, None),
    ast.In: (lambda a, b: a in b, None),
    ast.NotIn: (lambda a, b: a not in b, None),
}
_MATH_TILE = {
    math.exp: tile_compute.Exp,
    math.log: tile_compute.Log,
    math.sqrt: tile_compute.Sqrt,
    math.fabs: tile_compute.Abs,
}


class BoundMethod:
    """``x.astype`` and friends on a kernel value, waiting for their call."""

    def __init__(self, value: Value, name: str) -> None:
        self.value = value
        self.name = name


@expr_rule(ast.Constant)
def _constant(state: CompileState, node: ast.Constant) -> Any:
    return node.value


@expr_rule(ast.Tuple)
def _tuple(state: CompileState, node: ast.Tuple) -> Any:
    return tuple(expr(state, e) for e in node.elts)


@expr_rule(ast.List)
def _list(state: CompileState, node: ast.List) -> Any:
    return [expr(state, e) for e in node.elts]


@expr_rule(ast.Name)
def _name(state: CompileState, node: ast.Name) -> Any:
    return lookup(state, node.id, node)


def lookup(state: CompileState, name: str, node: ast.AST) -> Any:
    """The value of a bare name, in the order of :mod:`~tessera.frontend.kernel.compiler.scope`."""
    if name in state.env:
        v = state.env[name]
        if isinstance(v, Undefined):
            raise state.error(f"name '{name}' may be undefined here: {v.why}", node,
                              hint="assign it before the branch or loop",
                              cls=UndefinedNameError)
        return v
    dims = state.spec.dim_env
    if name in dims:
        return dims[name]
    if name in ORIGINS:
        return origin(state, name, node)
    if name in ("BM", "BN", "BK"):
        return state.spec.tile[EXTENTS[name]]
    for scope in reversed(state.scopes):
        if name in scope:
            return scope[name]
    if hasattr(builtins, name):
        return getattr(builtins, name)
    raise state.error(f"name '{name}' is not defined", node, cls=UndefinedNameError,
                      hint="kernel bodies see their parameters, local variables, the "
                           "dims of the annotations, tile_m/tile_n/tile_k, BM/BN/BK and "
                           "the module's globals")


def origin(state: CompileState, name: str, node: ast.AST) -> Value:
    """A tile-origin name (``tile_m``, ...): the grid coordinate times the tile extent."""
    axis = ORIGINS[name]
    if axis >= len(state.spec.grid):  # a grid without this axis has one slice: origin 0
        return state.constant(0, INDEX, node)
    coord = state.emit1(tile_ir.GridCoord(axis), [], node)
    ext = state.constant(state.spec.tile[axis], INDEX, node)
    return state.emit1(tile_compute.Mul(), [coord, ext], node)


@expr_rule(ast.Attribute)
def _attribute(state: CompileState, node: ast.Attribute) -> Any:
    value = expr(state, node.value)
    return attribute(state, value, node.attr, node)


def attribute(state: CompileState, value: Any, attr: str, node: ast.AST) -> Any:
    """``value.attr``: of ``ts.tile.context()``, of a kernel value, or of a Python object."""
    if isinstance(value, TileContext):
        return context_attr(state, attr, node)
    if is_value(value):
        t = value.type
        if attr == "T":
            tile = state.as_tile(value, node)
            return state.emit1(tile_compute.Transpose(), [tile], node)
        if attr == "shape":
            return tuple(t.shape)
        if attr == "ndim":
            return len(t.shape)
        if attr in ("dtype", "element"):
            return t.element
        if attr in ("astype", "to"):
            return BoundMethod(value, "astype")
        raise state.error(f"kernel values have no attribute '{attr}'", node,
                          hint="use .T, .shape, .dtype or .astype(dtype)")
    try:
        return getattr(value, attr)
    except AttributeError:
        what = value.__name__ if isinstance(value, types.ModuleType) else type(value).__name__
        raise state.error(f"{what} has no attribute '{attr}'", node,
                          cls=UndefinedNameError) from None


def context_attr(state: CompileState, attr: str, node: ast.AST) -> Any:
    """An attribute of ``ts.tile.context()``: config, tile shape, origins, dims, geometry."""
    cfg = state.spec.config_env
    if attr in cfg:
        return cfg[attr]
    if attr in EXTENTS:
        return state.spec.tile[EXTENTS[attr]]
    if attr in ORIGINS:
        return origin(state, attr, node)
    dims = state.spec.dim_env
    if attr in dims:
        return dims[attr]
    fixed = {"group_size": state.spec.group_size, "grid": state.spec.grid,
             "lanes": state.spec.lanes, "tile_shape": state.spec.tile,
             "batch": state.spec.batch}
    if attr in fixed:
        return fixed[attr]
    known = sorted(set(cfg) | set(EXTENTS) | set(ORIGINS) | set(dims) | set(fixed))
    raise state.error(f"ts.tile.context() has no attribute '{attr}'", node,
                      cls=UndefinedNameError, hint="known: " + ", ".join(known))


# -- operators
@expr_rule(ast.BinOp)
def _bin_op(state: CompileState, node: ast.BinOp) -> Any:
    return binop(state, node.op, expr(state, node.left), expr(state, node.right), node)


def binop(state: CompileState, op: ast.operator, a: Any, b: Any, node: ast.AST) -> Any:
    """``a op b``: folded for Python values, else one Tile IR op (``@`` is ``mma``)."""
    fold, cls = _BINOPS[type(op)]
    if not is_value(a) and not is_value(b):
        try:
            return fold(a, b)
        except Exception as err:
            raise state.error(f"{err}", node) from None
    if isinstance(op, ast.MatMult):
        return tile_call(state, "mma", [a, b], {}, node)
    if cls is None:
        raise state.error(f"operator {type(op).__name__} is not supported on tiles", node)
    va, vb = state.unify(a, b, node)
    elem = va.type.element  # type: ignore[attr-defined]
    if isinstance(op, ast.Div) and kind_of(elem) != "float":
        va, vb = state.cast(va, F32, node), state.cast(vb, F32, node)
    if isinstance(op, (ast.BitAnd, ast.BitOr)) and kind_of(elem) != "bool":
        raise state.error("& and | work on bool tiles only", node)
    return state.emit1(cls(), [va, vb], node)


@expr_rule(ast.UnaryOp)
def _unary_op(state: CompileState, node: ast.UnaryOp) -> Any:
    x = expr(state, node.operand)
    if not is_value(x):
        fold = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos,
                ast.Invert: operator.invert}[type(node.op)]
        try:
            return fold(x)
        except Exception as err:
            raise state.error(f"{err}", node) from None
    if isinstance(node.op, ast.Not):
        return state.emit1(tile_compute.Not(), [state.as_bool(x, node)], node)
    if isinstance(node.op, ast.UAdd):
        return state.as_tile(x, node)
    if isinstance(node.op, ast.USub):
        return state.emit1(tile_compute.Neg(), [state.as_tile(x, node)], node)
    raise state.error("~ is not supported on kernel values", node)


@expr_rule(ast.BoolOp)
def _bool_op(state: CompileState, node: ast.BoolOp) -> Any:
    is_and = isinstance(node.op, ast.And)
    acc: Any = None
    for k, sub in enumerate(node.values):
        v = expr(state, sub)
        if k == 0:
            acc = v
            continue
        if not is_value(acc):  # Python's short circuit on a constant
            if bool(acc) != is_and:
                return acc
            acc = v
            continue
        rhs = state.as_bool(v, sub) if is_value(v) else state.as_bool(bool(v), sub)
        acc = state.emit1(
            tile_compute.And() if is_and else tile_compute.Or(),
            [state.as_bool(acc, sub), rhs],
            node,
        )
    return acc


@expr_rule(ast.Compare)
def _compare(state: CompileState, node: ast.Compare) -> Any:
    left = expr(state, node.left)
    result: Any = True
    for op, right_node in zip(node.ops, node.comparators):
        right = expr(state, right_node)
        fold, cls = _COMPARES[type(op)]
        if not is_value(left) and not is_value(right):
            part: Any = fold(left, right)
        elif cls is None:
            raise state.error(f"{type(op).__name__} does not apply to kernel values", node)
        else:
            va, vb = state.unify(left, right, node)
            part = state.emit1(cls(), [va, vb], node)
        if result is True:
            result = part
        elif is_value(result) or is_value(part):
            result = state.emit1(tile_compute.And(), [state.as_bool(result, node),
                                           state.as_bool(part, node)], node)
        else:
            result = result and part
        left = right
    return result


@expr_rule(ast.IfExp)
def _if_exp(state: CompileState, node: ast.IfExp) -> Any:
    cond = expr(state, node.test)
    if not is_value(cond):
        return expr(state, node.body if cond else node.orelse)
    a, b = state.unify(expr(state, node.body), expr(state, node.orelse), node)
    c = state.as_bool(cond, node)
    c = state.broadcast(c, a.type.shape, node)  # type: ignore[attr-defined]
    return state.emit1(tile_compute.Where(), [c, a, b], node)

__all__ = ["BoundMethod", "attribute", "binop", "lookup", "origin"]
