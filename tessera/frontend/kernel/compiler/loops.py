"""Loops of kernel bodies: ``tile.for`` and ``tile.while`` with loop-carried variables.

A variable assigned in the body that exists before the loop is *loop-carried*: a
region argument and a yielded value. Its type is the join of its value before the loop
and at the end of the body (``s = 0`` then ``s += x[i]`` carries an f32; ``acc = 0``
then ``acc = acc + tile`` carries a tile), so the body is recompiled until the types
agree. A memory variable only updated in place (``C += x``) is not rebound and not
carried. Variables first assigned in the body, and the loop variable, are undefined
after the loop. ``for x in (a, b, c)`` over a compile-time sequence is unrolled.
"""

from __future__ import annotations

import ast
import builtins
from typing import Any

from tessera.frontend.kernel.compiler import merge
from tessera.frontend.kernel.compiler.rules import expr, stmt_rule, stmts
from tessera.frontend.kernel.compiler.scope import Undefined, assigned_names
from tessera.frontend.kernel.compiler.state import CompileState, is_mem, is_value
from tessera.frontend.kernel.compiler.stmt import assign, without_augassign
from tessera.ir.core import Block, IRRegion, Value
from tessera.ir.dialects import tile as tile_ir


@stmt_rule(ast.For)
def _for(state: CompileState, s: ast.For) -> None:
    if s.orelse:
        raise state.error("for ... else is not supported in kernels", s)
    it = s.iter
    func = expr(state, it.func) if isinstance(it, ast.Call) else None
    if func is builtins.range or getattr(func, "_tile_api", None) == "range":
        assert isinstance(it, ast.Call)
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise state.error("range takes (stop), (start, stop) or (start, stop, step)", s)
        args = [expr(state, a) for a in it.args]
        lo, hi, step = (0, args[0], 1) if len(args) == 1 else \
            (args[0], args[1], args[2] if len(args) == 3 else 1)
        if not is_value(step) and step == 0:
            raise state.error("range() step must not be zero", s)
        if not isinstance(s.target, ast.Name):
            raise state.error("a range loop needs a single loop variable", s)
        range_loop(state, s.target.id, lo, hi, step, s)
        return
    seq = expr(state, it)
    if is_value(seq) or not hasattr(seq, "__iter__"):
        raise state.error("kernels loop over ts.tile.range(...), range(...) or a "
                          "compile-time sequence", s)
    for item in list(seq):  # unrolled
        assign(state, s.target, item, s)
        stmts(state, s.body)


def carried(state: CompileState, body: list[ast.stmt], exclude: str | None) -> list[str]:
    """Variables of the loop: assigned in ``body`` and defined before it (a memory
    variable that is only updated in place, ``C += x``, is not rebound)."""
    rebound = set(assigned_names([without_augassign(s) for s in body]))
    return [n for n in assigned_names(body) if n != exclude and n in state.env
            and not isinstance(state.env[n], Undefined)
            and (n in rebound or not is_mem(state.env[n]))]


def range_loop(state: CompileState, var: str, lo: Any, hi: Any, step: Any, s: ast.For) -> None:
    """A ``tile.for`` from ``lo`` to ``hi`` by ``step``, its body compiled until the
    carried variables' types settle."""
    names = carried(state, s.body, var)
    before = dict(state.env)
    types = [merge.type_of(state, before[n], s) for n in names]
    for _ in range(4):
        block = Block()
        idx = block.add_arg(tile_ir.SCALAR_INDEX, var)
        args = [block.add_arg(t, n) for n, t in zip(names, types)]
        new = loop_body(state, block, {**before, var: idx, **dict(zip(names, args))},
                               names, types, s)
        if new is None:
            break
        types = new
    else:
        raise state.error("the types of the loop-carried variables do not settle", s)
    state.env = dict(before)
    bounds = [state.as_index(x, s) for x in (lo, hi, step)]
    inits = [merge.coerce(state, before[n], t, s) for n, t in zip(names, types)]
    results = state.emit(tile_ir.For(), [*bounds, *inits], s, regions=[IRRegion([block])])
    after_loop(state, s.body, names, results, s, var)


def loop_body(state: CompileState, block: Block, env: dict[str, Any], names: list[str],
              types: list[Any], s: ast.For | ast.While) -> list[Any] | None:
    """Compile the loop body into ``block`` with the carried variables at ``types``.

    Returns None when the body leaves their types unchanged (the block then ends in
    its yield), else the widened types to try again with.
    """
    prev = state.enter(block)
    state.env = env
    stmts(state, s.body)
    after = state.env
    new = [merge.join(state, t, merge.type_of(state, after[n], s, after[n]), s, n)
           for n, t in zip(names, types)]
    if new == types:
        state.emit(
            tile_ir.Yield(), [merge.coerce(state, after[n], t, s) for n, t in zip(names, types)], s
        )
    state.leave(prev)
    return None if new == types else new


def after_loop(state: CompileState, body: list[ast.stmt], names: list[str], results: list[Value],
               s: ast.stmt, var: str | None) -> None:
    """Bind the loop's results to the carried variables; names first assigned in the
    body, and the loop variable, are undefined after the loop."""
    rebound = set(assigned_names([without_augassign(b) for b in body]))
    for n in assigned_names(body):
        if n not in names and (n in rebound or not is_mem(state.env.get(n))):
            state.env[n] = Undefined(n, f"it is assigned only inside the loop at "
                                        f"{state.loc(s)}")
    if var is not None:
        state.env[var] = Undefined(var, f"it is the variable of the loop at {state.loc(s)}")
    state.env.update(zip(names, results))


@stmt_rule(ast.While)
def _while(state: CompileState, s: ast.While) -> None:
    if s.orelse:
        raise state.error("while ... else is not supported in kernels", s)
    names = carried(state, s.body, None)
    before = dict(state.env)
    types = [merge.type_of(state, before[n], s) for n in names]
    for _ in range(4):
        cblock, bblock = Block(), Block()
        cargs = [cblock.add_arg(t, n) for n, t in zip(names, types)]
        prev = state.enter(cblock)
        state.env = dict(before)
        state.env.update(zip(names, cargs))
        cond = expr(state, s.test)
        if not is_value(cond):
            state.leave(prev)
            state.env = before
            if cond:
                raise state.error("while with a constant true condition never ends "
                                  "(kernels have no break)", s)
            return
        state.emit(tile_ir.Condition(), [state.as_bool(cond, s.test)], s)
        state.leave(prev)
        bargs = [bblock.add_arg(t, n) for n, t in zip(names, types)]
        new = loop_body(state, bblock, {**before, **dict(zip(names, bargs))}, names,
                               types, s)
        if new is None:
            break
        types = new
    else:
        raise state.error("the types of the loop-carried variables do not settle", s)
    state.env = dict(before)
    inits = [merge.coerce(state, before[n], t, s) for n, t in zip(names, types)]
    results = state.emit(tile_ir.While(), inits, s,
                         regions=[IRRegion([cblock]), IRRegion([bblock])])
    after_loop(state, s.body, names, results, s, None)


__all__ = ["after_loop", "carried", "loop_body", "range_loop"]
