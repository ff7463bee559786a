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

from tessera.frontend.kernel.compiler.build import BuilderBase, is_value, kind_of
from tessera.frontend.kernel.compiler.scope import EXTENTS, ORIGINS, TileContext, Undefined
from tessera.frontend.kernel.errors import UndefinedNameError
from tessera.ir.core import Value
from tessera.ir.dialects import tile as T
from tessera.ir.dialects.tile import INDEX
from tessera.ir.dialects.tile import compute as C

_BINOPS: dict[type, Any] = {
    ast.Add: (operator.add, C.Add), ast.Sub: (operator.sub, C.Sub),
    ast.Mult: (operator.mul, C.Mul), ast.Div: (operator.truediv, C.Div),
    ast.FloorDiv: (operator.floordiv, C.FloorDiv), ast.Mod: (operator.mod, C.Mod),
    ast.Pow: (operator.pow, C.Pow), ast.BitAnd: (operator.and_, C.And),
    ast.BitOr: (operator.or_, C.Or), ast.MatMult: (operator.matmul, None),
    ast.LShift: (operator.lshift, None), ast.RShift: (operator.rshift, None),
    ast.BitXor: (operator.xor, None)}
_COMPARES: dict[type, Any] = {
    ast.Lt: (operator.lt, C.Lt), ast.LtE: (operator.le, C.Le), ast.Gt: (operator.gt, C.Gt),
    ast.GtE: (operator.ge, C.Ge), ast.Eq: (operator.eq, C.Eq), ast.NotEq: (operator.ne, C.Ne),
    ast.Is: (operator.is_, None), ast.IsNot: (operator.is_not, None),
    ast.In: (lambda a, b: a in b, None), ast.NotIn: (lambda a, b: a not in b, None)}
_MATH_TILE = {math.exp: C.Exp, math.log: C.Log, math.sqrt: C.Sqrt, math.fabs: C.Abs}


class BoundMethod:
    """``x.astype`` and friends on a kernel value, waiting for their call."""

    def __init__(self, value: Value, name: str) -> None:
        self.value = value
        self.name = name


class ExprMixin(BuilderBase):
    """Expression compilation (mixed into the kernel compiler)."""

    env: dict[str, Any]
    scopes: list[dict[str, Any]]
    spec: Any

    def expr(self, node: ast.expr) -> Any:
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise self.error(f"{type(node).__name__} expressions are not supported in "
                             "kernels", node, hint="kernels support arithmetic, "
                             "comparisons, calls, subscripts, attributes and tuples")
        return method(node)

    def expr_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def expr_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.expr(e) for e in node.elts)

    def expr_List(self, node: ast.List) -> Any:
        return [self.expr(e) for e in node.elts]

    def expr_Name(self, node: ast.Name) -> Any:
        return self.lookup(node.id, node)

    def lookup(self, name: str, node: ast.AST) -> Any:
        if name in self.env:
            v = self.env[name]
            if isinstance(v, Undefined):
                raise self.error(f"name '{name}' may be undefined here: {v.why}", node,
                                 hint="assign it before the branch or loop",
                                 cls=UndefinedNameError)
            return v
        dims = self.spec.dim_env
        if name in dims:
            return dims[name]
        if name in ORIGINS:
            return self.origin(name, node)
        if name in ("BM", "BN", "BK"):
            return self.spec.tile[EXTENTS[name]]
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise self.error(f"name '{name}' is not defined", node, cls=UndefinedNameError,
                         hint="kernel bodies see their parameters, local variables, the "
                              "dims of the annotations, tile_m/tile_n/tile_k, BM/BN/BK and "
                              "the module's globals")

    def origin(self, name: str, node: ast.AST) -> Value:
        axis = ORIGINS[name]
        if axis >= len(self.spec.grid):  # a grid without this axis has one slice: origin 0
            return self.constant(0, INDEX, node)
        coord = self.emit1(T.GridCoord(axis), [], node)
        ext = self.constant(self.spec.tile[axis], INDEX, node)
        return self.emit1(C.Mul(), [coord, ext], node)

    def expr_Attribute(self, node: ast.Attribute) -> Any:
        value = self.expr(node.value)
        return self.attribute(value, node.attr, node)

    def attribute(self, value: Any, attr: str, node: ast.AST) -> Any:
        if isinstance(value, TileContext):
            return self.context_attr(attr, node)
        if is_value(value):
            t = value.type
            if attr == "T":
                tile = self.as_tile(value, node)
                return self.emit1(C.Transpose(), [tile], node)
            if attr == "shape":
                return tuple(t.shape)
            if attr == "ndim":
                return len(t.shape)
            if attr in ("dtype", "element"):
                return t.element
            if attr in ("astype", "to"):
                return BoundMethod(value, "astype")
            raise self.error(f"kernel values have no attribute '{attr}'", node,
                             hint="use .T, .shape, .dtype or .astype(dtype)")
        try:
            return getattr(value, attr)
        except AttributeError:
            what = value.__name__ if isinstance(value, types.ModuleType) else type(value).__name__
            raise self.error(f"{what} has no attribute '{attr}'", node,
                             cls=UndefinedNameError) from None

    def context_attr(self, attr: str, node: ast.AST) -> Any:
        cfg = self.spec.config_env
        if attr in cfg:
            return cfg[attr]
        if attr in EXTENTS:
            return self.spec.tile[EXTENTS[attr]]
        if attr in ORIGINS:
            return self.origin(attr, node)
        dims = self.spec.dim_env
        if attr in dims:
            return dims[attr]
        fixed = {"group_size": self.spec.group_size, "grid": self.spec.grid,
                 "lanes": self.spec.lanes, "tile_shape": self.spec.tile,
                 "batch": self.spec.batch}
        if attr in fixed:
            return fixed[attr]
        known = sorted(set(cfg) | set(EXTENTS) | set(ORIGINS) | set(dims) | set(fixed))
        raise self.error(f"ts.tile.context() has no attribute '{attr}'", node,
                         cls=UndefinedNameError, hint="known: " + ", ".join(known))

    # -- operators
    def expr_BinOp(self, node: ast.BinOp) -> Any:
        return self.binop(node.op, self.expr(node.left), self.expr(node.right), node)

    def binop(self, op: ast.operator, a: Any, b: Any, node: ast.AST) -> Any:
        fold, cls = _BINOPS[type(op)]
        if not is_value(a) and not is_value(b):
            try:
                return fold(a, b)
            except Exception as err:
                raise self.error(f"{err}", node) from None
        if isinstance(op, ast.MatMult):
            return self.tile_call("mma", [a, b], {}, node)
        if cls is None:
            raise self.error(f"operator {type(op).__name__} is not supported on tiles", node)
        va, vb = self.unify(a, b, node)
        elem = va.type.element  # type: ignore[attr-defined]
        if isinstance(op, ast.Div) and kind_of(elem) != "float":
            va, vb = self.cast(va, self.f32, node), self.cast(vb, self.f32, node)
        if isinstance(op, (ast.BitAnd, ast.BitOr)) and kind_of(elem) != "bool":
            raise self.error("& and | work on bool tiles only", node)
        return self.emit1(cls(), [va, vb], node)

    @property
    def f32(self) -> Any:
        from tessera.frontend.kernel.compiler.build import F32

        return F32

    def expr_UnaryOp(self, node: ast.UnaryOp) -> Any:
        x = self.expr(node.operand)
        if not is_value(x):
            fold = {ast.Not: operator.not_, ast.USub: operator.neg, ast.UAdd: operator.pos,
                    ast.Invert: operator.invert}[type(node.op)]
            try:
                return fold(x)
            except Exception as err:
                raise self.error(f"{err}", node) from None
        if isinstance(node.op, ast.Not):
            return self.emit1(C.Not(), [self.as_bool(x, node)], node)
        if isinstance(node.op, ast.UAdd):
            return self.as_tile(x, node)
        if isinstance(node.op, ast.USub):
            return self.emit1(C.Neg(), [self.as_tile(x, node)], node)
        raise self.error("~ is not supported on kernel values", node)

    def expr_BoolOp(self, node: ast.BoolOp) -> Any:
        is_and = isinstance(node.op, ast.And)
        acc: Any = None
        for k, sub in enumerate(node.values):
            v = self.expr(sub)
            if k == 0:
                acc = v
                continue
            if not is_value(acc):  # Python's short circuit on a constant
                if bool(acc) != is_and:
                    return acc
                acc = v
                continue
            rhs = self.as_bool(v, sub) if is_value(v) else self.as_bool(bool(v), sub)
            acc = self.emit1(C.And() if is_and else C.Or(), [self.as_bool(acc, sub), rhs], node)
        return acc

    def expr_Compare(self, node: ast.Compare) -> Any:
        left = self.expr(node.left)
        result: Any = True
        for op, right_node in zip(node.ops, node.comparators):
            right = self.expr(right_node)
            fold, cls = _COMPARES[type(op)]
            if not is_value(left) and not is_value(right):
                part: Any = fold(left, right)
            elif cls is None:
                raise self.error(f"{type(op).__name__} does not apply to kernel values", node)
            else:
                va, vb = self.unify(left, right, node)
                part = self.emit1(cls(), [va, vb], node)
            if result is True:
                result = part
            elif is_value(result) or is_value(part):
                result = self.emit1(C.And(), [self.as_bool(result, node),
                                              self.as_bool(part, node)], node)
            else:
                result = result and part
            left = right
        return result

    def expr_IfExp(self, node: ast.IfExp) -> Any:
        cond = self.expr(node.test)
        if not is_value(cond):
            return self.expr(node.body if cond else node.orelse)
        a, b = self.unify(self.expr(node.body), self.expr(node.orelse), node)
        c = self.as_bool(cond, node)
        c = self.broadcast(c, a.type.shape, node)  # type: ignore[attr-defined]
        return self.emit1(C.Where(), [c, a, b], node)

__all__ = ["BoundMethod", "ExprMixin"]
