"""The kernel compiler's rule tables and the functions that dispatch through them.

Three tables, each filled by the module that defines the rules (``stmt``, ``loops``,
``expr``, ``view``, ``call``, ``api``, ``api_compute``; the package imports them all):

* ``STMT_RULES``: Python statement class (``ast.Assign``, ``ast.For``, ...) → rule;
* ``EXPR_RULES``: Python expression class (``ast.BinOp``, ``ast.Call``, ...) → rule;
* ``API_RULES``: ``ts.tile.*`` name → :class:`ApiRule` (its parameters and the rule).

A rule is a plain function of the compilation's state
(:class:`~tessera.frontend.kernel.compiler.state.CompileState`) and the node; a
statement or expression without a rule is a
:class:`~tessera.frontend.kernel.errors.KernelCompileError` at its line.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tessera.frontend.kernel.compiler.state import CompileState
from tessera.ir.core import rule_decorator

#: statement class -> rule(state, stmt); ``return`` is structure, handled by ``stmts``
STMT_RULES: dict[type[ast.stmt], Callable[[CompileState, Any], None]] = {}
#: expression class -> rule(state, expr) returning a Python value or an IR value
EXPR_RULES: dict[type[ast.expr], Callable[[CompileState, Any], Any]] = {}

#: ``@stmt_rule(ast.Assign)``: register a statement rule
stmt_rule = rule_decorator(STMT_RULES, "statement rule")
#: ``@expr_rule(ast.BinOp)``: register an expression rule
expr_rule = rule_decorator(EXPR_RULES, "expression rule")

#: what ``stmts`` returns when the statements end without ``return``
NO_RETURN = object()


@dataclass(frozen=True)
class ApiRule:
    """The lowering of one ``ts.tile.*`` name: its parameters (names in order, defaults)
    and the rule, called as ``fn(state, node, **arguments)``. A *raw* rule takes the
    call's AST instead (``fn(state, name, node)``): its arguments are not evaluated
    first, because one of them names memory to access rather than a value."""

    fn: Callable[..., Any]
    params: tuple[str, ...] = ()
    defaults: dict[str, Any] = field(default_factory=dict)
    raw: bool = False


#: ``ts.tile.*`` name -> its rule; ``range`` has none (it is structure of ``for``)
API_RULES: dict[str, ApiRule] = {}


def api_rule(*names: str, params: tuple[str, ...] = (), defaults: dict[str, Any] | None = None,
             raw: bool = False) -> Callable[[Any], Any]:
    """``@api_rule("mma", params=("a", "b", "accumulator"), defaults=...)``: register the
    lowering of ``ts.tile.<name>`` for each name (a second rule for a name is an error)."""
    def register(fn: Any) -> Any:
        for name in names:
            if name in API_RULES:
                raise ValueError(f"ts.tile.{name} has two rules")
            API_RULES[name] = ApiRule(fn, params, dict(defaults or {}), raw)
        return fn
    return register


def expr(state: CompileState, node: ast.expr) -> Any:
    """Compile an expression: a Python value when it folds, else an IR value."""
    rule = EXPR_RULES.get(type(node))
    if rule is None:
        raise state.error(f"{type(node).__name__} expressions are not supported in "
                          "kernels", node, hint="kernels support arithmetic, "
                          "comparisons, calls, subscripts, attributes and tuples")
    return rule(state, node)


def stmts(state: CompileState, body: list[ast.stmt], top: bool = False) -> Any:
    """Compile statements; at the top of a kernel or inlined function a final ``return``
    gives the result (``NO_RETURN`` when there is none)."""
    for k, s in enumerate(body):
        if isinstance(s, ast.Return):
            if not top or k != len(body) - 1:
                raise state.error("return is only supported as the last statement of a "
                                  "kernel or inlined function", s,
                                  hint="assign a variable in the branches and return it "
                                       "at the end")
            return expr(state, s.value) if s.value is not None else None
        rule = STMT_RULES.get(type(s))
        if rule is None:
            raise state.error(f"{type(s).__name__} statements are not supported in "
                              "kernels", s, hint="kernels support assignments, if, for, "
                              "while, expression calls and a final return")
        rule(state, s)
    return NO_RETURN


def _arguments(name: str, args: list[Any], kwargs: dict[str, Any], names: tuple[str, ...],
               defaults: dict[str, Any]) -> dict[str, Any]:
    if len(args) > len(names):
        raise TypeError(f"ts.tile.{name}() takes at most {len(names)} arguments "
                        f"({', '.join(names)}), got {len(args)}")
    out = dict(defaults)
    out.update(zip(names, args))
    for k, v in kwargs.items():
        if k not in names:
            raise TypeError(f"ts.tile.{name}() has no argument {k!r}; it takes "
                            f"{', '.join(names)}")
        out[k] = v
    missing = [n for n in names if n not in out]
    if missing:
        raise TypeError(f"ts.tile.{name}() needs {', '.join(missing)}")
    return out


def tile_call(state: CompileState, name: str, args: list[Any], kwargs: dict[str, Any],
              node: ast.AST) -> Any:
    """Lower ``ts.tile.<name>(*args, **kwargs)`` (arguments already compiled)."""
    rule = API_RULES.get(name)
    params, defaults = (rule.params, rule.defaults) if rule is not None else ((), {})
    try:
        bound = _arguments(name, args, kwargs, params, defaults)
    except TypeError as err:
        raise state.error(str(err), node) from None
    if rule is None:
        raise state.error(f"ts.tile.{name}() is used as a loop range only", node,
                          hint=f"write 'for i in ts.tile.{name}(start, stop, step):'")
    return rule.fn(state, node, **bound)


__all__ = ["API_RULES", "EXPR_RULES", "NO_RETURN", "STMT_RULES", "ApiRule", "api_rule",
           "expr", "expr_rule", "stmt_rule", "stmts", "tile_call"]
