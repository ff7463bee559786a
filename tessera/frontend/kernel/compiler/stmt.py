"""Statements of kernel bodies, and the SSA construction for variables.

Variables live in a compile-time environment. Control flow on a compile-time value
(``if is_causal:``) compiles only the branch taken. Otherwise:

* ``if`` compiles both branches into the regions of a ``tile.if``; a variable assigned
  in either branch becomes a result of the ``tile.if`` (a merged value); one assigned
  in only one branch, with no value before, is undefined after it.
* ``for i in ts.tile.range(...)`` / ``range(...)`` becomes ``tile.for`` and ``while``
  becomes ``tile.while``, with loop-carried variables (:mod:`.loops`); the types of merged and
  carried variables are joined in :mod:`.merge`.
* ``A[...] = v`` stores, ``A[...] += v`` (any ``op=``) is one read-modify-write
  (``tile.update``), ``C += v`` on a memory variable updates all of it.
* ``return`` is allowed as the last statement of the kernel (or of an inlined function) only;
  ``break``, ``continue``, ``with`` and ``try`` are not supported.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from tessera.frontend.kernel.compiler import merge
from tessera.frontend.kernel.compiler.expr import binop
from tessera.frontend.kernel.compiler.rules import expr, stmt_rule, stmts
from tessera.frontend.kernel.compiler.scope import Undefined, assigned_names
from tessera.frontend.kernel.compiler.state import CompileState, is_mem, is_value, kind_of
from tessera.frontend.kernel.compiler.view import view as memory_view
from tessera.ir.core import Block, IRRegion, Value
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import MemRefType
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.types import TensorType


def without_augassign(stmt: ast.stmt) -> ast.stmt:
    """``stmt`` with augmented assignments replaced by ``pass`` (for rebinding analysis)."""
    class Strip(ast.NodeTransformer):
        def visit_AugAssign(self, node: ast.AugAssign) -> ast.AST:
            return ast.Pass()
    return Strip().visit(copy.deepcopy(stmt))
_UPDATE = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div",
           ast.FloorDiv: "floordiv", ast.Mod: "mod"}


@stmt_rule(ast.Expr)
def _expr(state: CompileState, s: ast.Expr) -> None:
    if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
        return  # a docstring
    expr(state, s.value)


@stmt_rule(ast.Pass)
def _pass(state: CompileState, s: ast.Pass) -> None:
    return


@stmt_rule(ast.Assert)
def _assert(state: CompileState, s: ast.Assert) -> None:
    cond = expr(state, s.test)
    if is_value(cond):
        raise state.error("assert needs a compile-time condition in a kernel", s)
    if not cond:
        msg = expr(state, s.msg) if s.msg is not None else "assertion failed"
        raise state.error(f"assert failed while compiling: {msg}", s)


@stmt_rule(ast.Assign)
def _assign(state: CompileState, s: ast.Assign) -> None:
    value = expr(state, s.value)
    for target in s.targets:
        assign(state, target, value, s)


@stmt_rule(ast.AnnAssign)
def _ann_assign(state: CompileState, s: ast.AnnAssign) -> None:
    if s.value is not None:
        assign(state, s.target, expr(state, s.value), s)


def assign(state: CompileState, target: ast.expr, value: Any, node: ast.AST) -> None:
    """Bind ``value`` to an assignment target: a name, a tuple to unpack, or memory."""
    if isinstance(target, ast.Name):
        if is_mem(value) and not value.type.shape:  # type: ignore[attr-defined]
            value = state.emit1(tile_memory.Load(), [value], node)  # x = A[i] reads A[i] now
        state.env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)):
        if is_value(value) or not isinstance(value, (tuple, list)):
            raise state.error("only tuples and lists can be unpacked in kernels", node)
        if len(value) != len(target.elts):
            raise state.error(f"cannot unpack {len(value)} values into "
                              f"{len(target.elts)} names", node)
        for t, v in zip(target.elts, value):
            assign(state, t, v, node)
    elif isinstance(target, ast.Subscript):
        store(state, target_view(state, target), value, node)
    else:
        raise state.error(f"cannot assign to {type(target).__name__} in a kernel", node)


def target_view(state: CompileState, target: ast.Subscript) -> Value:
    """The memory view an assignment's subscript target names."""
    mem = expr(state, target.value)
    if not is_mem(mem):
        raise state.error("only memory (a global tensor or shared buffer) can be assigned "
                          "through a subscript", target, hint="tiles are values: build a "
                          "new tile (ts.tile.where) instead of assigning elements")
    return memory_view(state, mem, target.slice, target)


def store(state: CompileState, view: Value, value: Any, node: ast.AST,
          op: str | None = None) -> None:
    """Store ``value`` into the memory ``view`` (``op``: a read-modify-write,
    ``tile.update``), cast and broadcast to it."""
    mt = view.type
    assert isinstance(mt, MemRefType)
    v = state.as_tile(value, node, mt.element)
    t = v.type
    assert isinstance(t, TensorType)
    if kind_of(t.element) != kind_of(mt.element) and (op is not None or
                                                      kind_of(mt.element) == "bool"):
        v = state.cast(v, mt.element, node)
    if t.shape != mt.shape:
        if len(t.shape) > len(mt.shape):
            raise state.error(f"cannot store a {t.shape} tile into a {mt.shape} view", node)
        v = state.broadcast(v, mt.shape, node)
    if op is None:
        state.emit(tile_memory.Store(), [view, v], node)
    else:
        state.emit(tile_memory.Update(op), [view, v], node)


@stmt_rule(ast.AugAssign)
def _aug_assign(state: CompileState, s: ast.AugAssign) -> None:
    if isinstance(s.target, ast.Subscript):
        view = target_view(state, s.target)
        store(state, view, expr(state, s.value), s, update_op(state, s))
        return
    if not isinstance(s.target, ast.Name):
        raise state.error("augmented assignment needs a name or a subscript", s)
    current = expr(state, s.target)
    rhs = expr(state, s.value)
    if is_mem(current):  # C += x on a whole memory: a read-modify-write
        store(state, current, rhs, s, update_op(state, s))
        return
    state.env[s.target.id] = binop(state, s.op, current, rhs, s)


def update_op(state: CompileState, s: ast.AugAssign) -> str:
    """The ``tile.update`` operation of an augmented assignment to memory."""
    op = _UPDATE.get(type(s.op))
    if op is None:
        raise state.error(f"{type(s.op).__name__}= is not supported on memory", s)
    return op


# -- if
@stmt_rule(ast.If)
def _if(state: CompileState, s: ast.If) -> None:
    cond = expr(state, s.test)
    if not is_value(cond):
        stmts(state, s.body if cond else s.orelse)
        return
    c = state.as_bool(cond, s.test)
    names = assigned_names(s.body + s.orelse)
    before = dict(state.env)
    branches: list[tuple[Block, dict[str, Any]]] = []
    for body in (s.body, s.orelse):
        block = Block()
        prev = state.enter(block)
        state.env = dict(before)
        stmts(state, body)
        branches.append((block, state.env))
        state.leave(prev)
    state.env = dict(before)
    merged: list[tuple[str, Any, Any]] = []
    for n in names:
        vt, ve = branches[0][1].get(n, Undefined(n, "")), branches[1][1].get(n, Undefined(
            n, ""))
        if vt is ve:
            if n in before or not isinstance(vt, Undefined):
                state.env[n] = vt
            continue
        if isinstance(vt, Undefined) or isinstance(ve, Undefined):
            state.env[n] = Undefined(n, f"it is assigned in only one branch of the if at "
                                        f"{state.loc(s)}")
            continue
        if not is_value(vt) and not is_value(ve) and type(vt) is type(ve) and vt == ve:
            state.env[n] = vt
            continue
        merged.append((n, vt, ve))
    types = [merge.join(state, merge.type_of(state, vt, s, ve), merge.type_of(state, ve, s, vt),
                        s, n)
             for n, vt, ve in merged]
    for block, env in branches:
        prev = state.enter(block)
        values = [merge.coerce(state, env[n], t, s) for (n, _, _), t in zip(merged, types)]
        state.emit(tile_ir.Yield(), values, s)
        state.leave(prev)
    results = state.emit(tile_ir.If(), [c], s, result_types=types,
                         regions=[IRRegion([branches[0][0]]), IRRegion([branches[1][0]])])
    for (n, _, _), r in zip(merged, results):
        state.env[n] = r


__all__ = ["assign", "store", "target_view", "update_op", "without_augassign"]
