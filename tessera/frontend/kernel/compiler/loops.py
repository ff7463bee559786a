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

from tessera.frontend.kernel.compiler.build import BuilderBase, is_mem, is_value
from tessera.frontend.kernel.compiler.scope import Undefined, assigned_names
from tessera.frontend.kernel.compiler.stmt import without_augassign
from tessera.ir.core import Block, IRRegion, Value
from tessera.ir.dialects import tile as T


class LoopMixin(BuilderBase):
    """Loop compilation (mixed into the kernel compiler)."""

    env: dict[str, Any]

    def stmt_For(self, s: ast.For) -> None:
        if s.orelse:
            raise self.error("for ... else is not supported in kernels", s)
        it = s.iter
        func = self.expr(it.func) if isinstance(it, ast.Call) else None  # type: ignore
        if func is builtins.range or getattr(func, "_tile_api", None) == "range":
            assert isinstance(it, ast.Call)
            if it.keywords or not 1 <= len(it.args) <= 3:
                raise self.error("range takes (stop), (start, stop) or (start, stop, step)", s)
            args = [self.expr(a) for a in it.args]  # type: ignore[attr-defined]
            lo, hi, step = (0, args[0], 1) if len(args) == 1 else \
                (args[0], args[1], args[2] if len(args) == 3 else 1)
            if not is_value(step) and step == 0:
                raise self.error("range() step must not be zero", s)
            if not isinstance(s.target, ast.Name):
                raise self.error("a range loop needs a single loop variable", s)
            self.range_loop(s.target.id, lo, hi, step, s)
            return
        seq = self.expr(it)  # type: ignore[attr-defined]
        if is_value(seq) or not hasattr(seq, "__iter__"):
            raise self.error("kernels loop over ts.tile.range(...), range(...) or a "
                             "compile-time sequence", s)
        for item in list(seq):  # unrolled
            self.assign(s.target, item, s)
            self.stmts(s.body)

    def carried(self, body: list[ast.stmt], exclude: str | None) -> list[str]:
        """Variables of the loop: assigned in ``body`` and defined before it (a memory
        variable that is only updated in place, ``C += x``, is not rebound)."""
        rebound = set(assigned_names([without_augassign(s) for s in body]))
        return [n for n in assigned_names(body) if n != exclude and n in self.env
                and not isinstance(self.env[n], Undefined)
                and (n in rebound or not is_mem(self.env[n]))]

    def range_loop(self, var: str, lo: Any, hi: Any, step: Any, s: ast.For) -> None:
        names = self.carried(s.body, var)
        before = dict(self.env)
        types = [self.type_of(before[n], s) for n in names]
        for _ in range(4):
            block = Block()
            idx = block.add_arg(T.SCALAR_INDEX, var)
            args = [block.add_arg(t, n) for n, t in zip(names, types)]
            new = self.loop_body(block, {**before, var: idx, **dict(zip(names, args))},
                                 names, types, s)
            if new is None:
                break
            types = new
        else:
            raise self.error("the types of the loop-carried variables do not settle", s)
        self.env = dict(before)
        bounds = [self.as_index(x, s) for x in (lo, hi, step)]
        inits = [self.coerce(before[n], t, s) for n, t in zip(names, types)]
        results = self.emit(T.For(), [*bounds, *inits], s, regions=[IRRegion([block])])
        self.after_loop(s.body, names, results, s, var)

    def loop_body(self, block: Block, env: dict[str, Any], names: list[str],
                  types: list[Any], s: ast.For | ast.While) -> list[Any] | None:
        """Compile the loop body into ``block`` with the carried variables at ``types``.

        Returns None when the body leaves their types unchanged (the block then ends in
        its yield), else the widened types to try again with.
        """
        prev = self.enter(block)
        self.env = env
        self.stmts(s.body)
        after = self.env
        new = [self.join(t, self.type_of(after[n], s, after[n]), s, n)
               for n, t in zip(names, types)]
        if new == types:
            self.emit(T.Yield(), [self.coerce(after[n], t, s) for n, t in zip(names, types)],
                      s)
        self.leave(prev)
        return None if new == types else new

    def after_loop(self, body: list[ast.stmt], names: list[str], results: list[Value],
                   s: ast.stmt, var: str | None) -> None:
        rebound = set(assigned_names([without_augassign(b) for b in body]))
        for n in assigned_names(body):
            if n not in names and (n in rebound or not is_mem(self.env.get(n))):
                self.env[n] = Undefined(n, f"it is assigned only inside the loop at "
                                           f"{self.loc(s)}")
        if var is not None:
            self.env[var] = Undefined(var, f"it is the variable of the loop at {self.loc(s)}")
        self.env.update(zip(names, results))

    def stmt_While(self, s: ast.While) -> None:
        if s.orelse:
            raise self.error("while ... else is not supported in kernels", s)
        names = self.carried(s.body, None)
        before = dict(self.env)
        types = [self.type_of(before[n], s) for n in names]
        for _ in range(4):
            cblock, bblock = Block(), Block()
            cargs = [cblock.add_arg(t, n) for n, t in zip(names, types)]
            prev = self.enter(cblock)
            self.env = dict(before)
            self.env.update(zip(names, cargs))
            cond = self.expr(s.test)  # type: ignore[attr-defined]
            if not is_value(cond):
                self.leave(prev)
                self.env = before
                if cond:
                    raise self.error("while with a constant true condition never ends "
                                     "(kernels have no break)", s)
                return
            self.emit(T.Condition(), [self.as_bool(cond, s.test)], s)
            self.leave(prev)
            bargs = [bblock.add_arg(t, n) for n, t in zip(names, types)]
            new = self.loop_body(bblock, {**before, **dict(zip(names, bargs))}, names,
                                 types, s)
            if new is None:
                break
            types = new
        else:
            raise self.error("the types of the loop-carried variables do not settle", s)
        self.env = dict(before)
        inits = [self.coerce(before[n], t, s) for n, t in zip(names, types)]
        results = self.emit(T.While(), inits, s,
                            regions=[IRRegion([cblock]), IRRegion([bblock])])
        self.after_loop(s.body, names, results, s, None)


__all__ = ["LoopMixin"]
