"""Statements of kernel bodies, and the SSA construction for variables.

Variables live in a compile-time environment. Control flow on a compile-time value
(``if is_causal:``) compiles only the branch taken. Otherwise:

* ``if`` compiles both branches into the regions of a ``tile.if``; a variable assigned
  in either branch becomes a result of the ``tile.if`` (a merged value); one assigned
  in only one branch, with no value before, is undefined after it.
* ``for i in ts.tile.range(...)`` / ``range(...)`` becomes ``tile.for`` and ``while``
  becomes ``tile.while``, with loop-carried variables (:mod:`.kernel_loops`).
* ``A[...] = v`` stores, ``A[...] += v`` (any ``op=``) is one read-modify-write
  (``tile.update``), ``C += v`` on a memory variable updates all of it.
* ``return`` is allowed as the last statement of the kernel (or of an inlined function) only;
  ``break``, ``continue``, ``with`` and ``try`` are not supported.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

import numpy as np

from tessera.frontend.kernel.compiler.build import BuilderBase, is_mem, is_tile, is_value, kind_of
from tessera.frontend.kernel.compiler.scope import Undefined, assigned_names
from tessera.ir.core import Block, IRRegion, Type, Value
from tessera.ir.dialects import tile as T
from tessera.ir.dialects.tile import INDEX, MemRefType
from tessera.ir.dialects.tile import memory as M
from tessera.ir.types import TensorType
from tessera.numerics import promote, storage_of

NO_RETURN = object()


def without_augassign(stmt: ast.stmt) -> ast.stmt:
    """``stmt`` with augmented assignments replaced by ``pass`` (for rebinding analysis)."""
    class Strip(ast.NodeTransformer):
        def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
            return ast.Pass()
    return Strip().visit(copy.deepcopy(stmt))
_UPDATE = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
           ast.FloorDiv: "floordiv", ast.Mod: "mod"}


class StmtMixin(BuilderBase):
    """Statement compilation (mixed into the kernel compiler)."""

    env: dict[str, Any]

    def stmts(self, body: list[ast.stmt], top: bool = False) -> Any:
        """Compile statements; at the top of a kernel or inlined function a final ``return`` gives
        the result (``NO_RETURN`` when there is none)."""
        for k, s in enumerate(body):
            if isinstance(s, ast.Return):
                if not top or k != len(body) - 1:
                    raise self.error("return is only supported as the last statement of a "
                                     "kernel or inlined function", s,
                                     hint="assign a variable in the branches and return it "
                                          "at the end")
                return self.expr(s.value) if s.value is not None else None  # type: ignore
            method = getattr(self, "stmt_" + type(s).__name__, None)
            if method is None:
                raise self.error(f"{type(s).__name__} statements are not supported in "
                                 "kernels", s, hint="kernels support assignments, if, for, "
                                 "while, expression calls and a final return")
            method(s)
        return NO_RETURN

    def stmt_Expr(self, s: ast.Expr) -> None:
        if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            return  # a docstring
        self.expr(s.value)  # type: ignore[attr-defined]

    def stmt_Pass(self, s: ast.Pass) -> None:
        return

    def stmt_Assert(self, s: ast.Assert) -> None:
        cond = self.expr(s.test)  # type: ignore[attr-defined]
        if is_value(cond):
            raise self.error("assert needs a compile-time condition in a kernel", s)
        if not cond:
            msg = self.expr(s.msg) if s.msg is not None else "assertion failed"  # type: ignore
            raise self.error(f"assert failed while compiling: {msg}", s)

    def stmt_Assign(self, s: ast.Assign) -> None:
        value = self.expr(s.value)  # type: ignore[attr-defined]
        for target in s.targets:
            self.assign(target, value, s)

    def stmt_AnnAssign(self, s: ast.AnnAssign) -> None:
        if s.value is not None:
            self.assign(s.target, self.expr(s.value), s)  # type: ignore[attr-defined]

    def assign(self, target: ast.expr, value: Any, node: ast.AST) -> None:
        if isinstance(target, ast.Name):
            if is_mem(value) and not value.type.shape:  # type: ignore[attr-defined]
                value = self.emit1(M.Load(), [value], node)  # x = A[i] reads A[i] now
            self.env[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if is_value(value) or not isinstance(value, (tuple, list)):
                raise self.error("only tuples and lists can be unpacked in kernels", node)
            if len(value) != len(target.elts):
                raise self.error(f"cannot unpack {len(value)} values into "
                                 f"{len(target.elts)} names", node)
            for t, v in zip(target.elts, value):
                self.assign(t, v, node)
        elif isinstance(target, ast.Subscript):
            self.store(self.target_view(target), value, node)
        else:
            raise self.error(f"cannot assign to {type(target).__name__} in a kernel", node)

    def target_view(self, target: ast.Subscript) -> Value:
        mem = self.expr(target.value)  # type: ignore[attr-defined]
        if not is_mem(mem):
            raise self.error("only memory (a global tensor or shared buffer) can be assigned "
                             "through a subscript", target, hint="tiles are values: build a "
                             "new tile (ts.tile.where) instead of assigning elements")
        return self.view(mem, target.slice, target)  # type: ignore[attr-defined]

    def store(self, view: Value, value: Any, node: ast.AST, op: str | None = None) -> None:
        mt = view.type
        assert isinstance(mt, MemRefType)
        v = self.as_tile(value, node, mt.element)
        t = v.type
        assert isinstance(t, TensorType)
        if kind_of(t.element) != kind_of(mt.element) and (op is not None or
                                                          kind_of(mt.element) == "bool"):
            v = self.cast(v, mt.element, node)
        if t.shape != mt.shape:
            if len(t.shape) > len(mt.shape):
                raise self.error(f"cannot store a {t.shape} tile into a {mt.shape} view", node)
            v = self.broadcast(v, mt.shape, node)
        if op is None:
            self.emit(M.Store(), [view, v], node)
        else:
            self.emit(M.Update(op), [view, v], node)

    def stmt_AugAssign(self, s: ast.AugAssign) -> None:
        if isinstance(s.target, ast.Subscript):
            view = self.target_view(s.target)
            self.store(view, self.expr(s.value), s, self.update_op(s))  # type: ignore
            return
        if not isinstance(s.target, ast.Name):
            raise self.error("augmented assignment needs a name or a subscript", s)
        current = self.expr(s.target)  # type: ignore[attr-defined]
        rhs = self.expr(s.value)  # type: ignore[attr-defined]
        if is_mem(current):  # C += x on a whole memory: a read-modify-write
            self.store(current, rhs, s, self.update_op(s))
            return
        self.env[s.target.id] = self.binop(s.op, current, rhs, s)  # type: ignore[attr-defined]

    def update_op(self, s: ast.AugAssign) -> str:
        op = _UPDATE.get(type(s.op))
        if op is None:
            raise self.error(f"{type(s.op).__name__}= is not supported on memory", s)
        return op

    # -- if
    def stmt_If(self, s: ast.If) -> None:
        cond = self.expr(s.test)  # type: ignore[attr-defined]
        if not is_value(cond):
            self.stmts(s.body if cond else s.orelse)
            return
        c = self.as_bool(cond, s.test)
        names = assigned_names(s.body + s.orelse)
        before = dict(self.env)
        branches: list[tuple[Block, dict[str, Any]]] = []
        for body in (s.body, s.orelse):
            block = Block()
            prev = self.enter(block)
            self.env = dict(before)
            self.stmts(body)
            branches.append((block, self.env))
            self.leave(prev)
        self.env = dict(before)
        merged: list[tuple[str, Any, Any]] = []
        for n in names:
            vt, ve = branches[0][1].get(n, Undefined(n, "")), branches[1][1].get(n, Undefined(
                n, ""))
            if vt is ve:
                if n in before or not isinstance(vt, Undefined):
                    self.env[n] = vt
                continue
            if isinstance(vt, Undefined) or isinstance(ve, Undefined):
                self.env[n] = Undefined(n, f"it is assigned in only one branch of the if at "
                                           f"{self.loc(s)}")
                continue
            if not is_value(vt) and not is_value(ve) and type(vt) is type(ve) and vt == ve:
                self.env[n] = vt
                continue
            merged.append((n, vt, ve))
        types = [self.join(self.type_of(vt, s, ve), self.type_of(ve, s, vt), s, n)
                 for n, vt, ve in merged]
        for block, env in branches:
            prev = self.enter(block)
            values = [self.coerce(env[n], t, s) for (n, _, _), t in zip(merged, types)]
            self.emit(T.Yield(), values, s)
            self.leave(prev)
        results = self.emit(T.If(), [c], s, result_types=types,
                            regions=[IRRegion([branches[0][0]]), IRRegion([branches[1][0]])])
        for (n, _, _), r in zip(merged, results):
            self.env[n] = r

    # -- types of merged and carried variables
    def type_of(self, x: Any, node: ast.AST, other: Any = None) -> Type:
        if is_value(x):
            if is_mem(x) and not x.type.shape:  # type: ignore[attr-defined]
                return TensorType((), x.type.element)  # type: ignore[attr-defined]
            return x.type
        like = other.type.element if is_tile(other) else None  # type: ignore[attr-defined]
        if isinstance(x, (bool, int, float)) or hasattr(x, "dtype"):
            return self.materialise_type(x, like)
        raise self.error(f"a variable holding {type(x).__name__} {x!r} changes in control flow "
                         "that depends on kernel values", node, hint="only tiles, scalars "
                         "and memory can change inside runtime loops and branches")

    def materialise_type(self, x: Any, like: Any) -> Type:
        if isinstance(x, bool):
            return TensorType((), T.BOOL)
        if isinstance(x, int):
            return TensorType((), like if like is not None and
                              kind_of(like) in ("int", "float") else INDEX)
        return TensorType((), like if like is not None and kind_of(like) == "float"
                          else self.f32)  # type: ignore[attr-defined]

    def join(self, a: Type, b: Type, node: ast.AST, name: str) -> Type:
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
        raise self.error(f"variable '{name}' is {a} on one path and {b} on another", node,
                         hint="give it the same shape (and memory) on every path; start "
                              "accumulators with ts.tile.zeros((...))")

    def coerce(self, x: Any, t: Type, node: ast.AST) -> Value:
        """``x`` as a value of type ``t`` in the current block."""
        if isinstance(t, MemRefType):
            return x
        assert isinstance(t, TensorType)
        v = self.as_tile(x, node, t.element)
        v = self.cast(v, t.element, node)
        if v.type.shape != t.shape:  # type: ignore[attr-defined]
            v = self.broadcast(v, t.shape, node)
        return v

__all__ = ["NO_RETURN", "StmtMixin"]
