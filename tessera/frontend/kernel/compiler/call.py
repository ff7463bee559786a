"""Calls in kernel bodies: the tile API, builtins, ``math``, and inlined functions.

* ``ts.tile.*`` calls lower through :mod:`tessera.frontend.kernel.compiler.api`.
* ``min`` / ``max`` / ``abs`` / ``int`` / ``float`` / ``bool`` / ``len`` work on
  compile-time values (folded) and on kernel scalars (``min(a + 128, N)`` becomes
  ``tile.minimum``; ``int(x)`` truncates toward zero like Python).
* ``math.exp``/``log``/``sqrt``/``fabs`` of a kernel value become tile ops; any other
  call whose arguments are all compile-time values (``math.sqrt(ctx.D)``,
  ``float('inf')``) runs while compiling.
* A plain Python function defined outside tessera is *inlined*: its source is
  compiled in place, with the caller's tile names and dims visible. It may return one
  value with a final ``return`` statement.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from typing import Any

from tessera.frontend.kernel.compiler.expr import _MATH_TILE, BoundMethod
from tessera.frontend.kernel.compiler.rules import API_RULES, expr, expr_rule, stmts, tile_call
from tessera.frontend.kernel.compiler.state import F32, CompileState, is_tile, is_value, kind_of
from tessera.ir.dialects.tile import INDEX
from tessera.ir.dialects.tile import compute as tile_compute

#: functions inlined deeper than this are taken to be recursive
MAX_INLINE_DEPTH = 32


def function_source(fn: Any) -> tuple[ast.FunctionDef, str, int]:
    """The AST of a Python function, its file and the line its source starts on."""
    cached = getattr(fn, "__tessera_ast__", None)
    if cached is not None:
        return cached
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as err:
        from tessera.frontend.kernel.errors import KernelCompileError

        raise KernelCompileError(f"cannot read the source of {fn.__name__}: {err}",
                                 hint="kernels and the functions they call must be defined in a "
                                      "file (not typed at an interactive prompt)") from None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    fdef = tree.body[0]
    if not isinstance(fdef, (ast.FunctionDef, ast.AsyncFunctionDef)):
        from tessera.frontend.kernel.errors import KernelCompileError

        raise KernelCompileError(f"{fn.__name__} is not a function definition")
    found = (fdef, inspect.getsourcefile(fn) or "<unknown>", first)
    try:
        fn.__tessera_ast__ = found
    except (AttributeError, TypeError):
        pass
    return found  # type: ignore[return-value]


def scope_of(fn: Any) -> dict[str, Any]:
    """A function's globals with its closure variables on top."""
    scope = dict(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                scope[name] = cell.cell_contents
            except ValueError:
                pass
    return scope


@expr_rule(ast.Call)
def _call(state: CompileState, node: ast.Call) -> Any:
    func = expr(state, node.func)
    api = getattr(func, "_tile_api", None)
    raw = API_RULES.get(api) if api is not None else None
    if raw is not None and raw.raw:  # arguments that name memory: not compiled first
        return raw.fn(state, api, node)
    args: list[Any] = []
    for a in node.args:
        if isinstance(a, ast.Starred):
            args.extend(expr(state, a.value))
        else:
            args.append(expr(state, a))
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            kwargs.update(expr(state, kw.value))
        else:
            kwargs[kw.arg] = expr(state, kw.value)
    if api is not None:
        return tile_call(state, api, args, kwargs, node)
    if isinstance(func, BoundMethod):
        if func.name == "astype" and len(args) == 1:
            return tile_call(state, "cast", [func.value, args[0]], {}, node)
        raise state.error(f".{func.name}() takes one dtype", node)
    dynamic = [a for a in [*args, *kwargs.values()] if is_value(a)]
    if func in (builtins.min, builtins.max) and dynamic:
        return minmax(state, func, args, node)
    if func is builtins.abs and dynamic:
        return tile_call(state, "abs", args, {}, node)
    if func in (builtins.int, builtins.float, builtins.bool) and dynamic:
        return convert(state, func, args, node)
    if func is builtins.len and dynamic:
        if len(args) == 1 and is_value(args[0]) and args[0].type.shape:
            return args[0].type.shape[0]
        raise state.error("len() of a kernel value needs a tile or memory of rank >= 1",
                          node)
    if func in _MATH_TILE and dynamic:
        return state.emit1(_MATH_TILE[func](), [float_tile(state, args[0], node)], node)
    if func is builtins.range and dynamic:
        raise state.error("range() of kernel values is only for loops: write "
                          "'for i in ts.tile.range(...)'", node)
    if is_inlined(func):
        return inline(state, func, args, kwargs, node)
    if _library(func) and dynamic:
        raise state.error(f"{getattr(func, '__name__', func)} is a graph-level operator; "
                          "kernels use ts.tile.* ops", node)
    if dynamic:
        raise state.error(f"cannot call {getattr(func, '__name__', func)!r} on kernel "
                          "values", node, hint="kernel code calls ts.tile.* ops, "
                          "builtins (min, max, abs, int, float) and plain Python functions")
    try:
        return func(*args, **kwargs)
    except Exception as err:
        raise state.error(f"calling {getattr(func, '__name__', func)!r} while compiling "
                          f"failed: {err}", node) from None


def is_inlined(func: Any) -> bool:
    """Whether a call of ``func`` in a kernel body compiles its source in place."""
    return inspect.isfunction(func) and not _library(func)


def _library(func: Any) -> bool:
    """Whether ``func`` is tessera's own (an operator, not kernel code to inline); the
    conformance suite's kernels are user code that ships with the package."""
    module = str(getattr(func, "__module__", "") or "")
    return (module == "tessera" or module.startswith("tessera.")) \
        and not module.startswith("tessera.conformance.")


def float_tile(state: CompileState, x: Any, node: ast.AST) -> Any:
    """``x`` as a float tile (integers and bools in f32), for ``math`` functions."""
    v = state.as_tile(x, node)
    if kind_of(v.type.element) != "float":  # type: ignore[attr-defined]
        v = state.cast(v, F32, node)
    return v


def minmax(state: CompileState, func: Any, args: list[Any], node: ast.AST) -> Any:
    """``min``/``max`` over values some of which are kernel values (constants folded first)."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        args = list(args[0])
    if len(args) < 2:
        raise state.error(f"{func.__name__}() of kernel values takes two or more values",
                          node)
    consts = [a for a in args if not is_value(a)]
    acc: Any = func(consts) if consts else None
    cls = tile_compute.Minimum if func is builtins.min else tile_compute.Maximum
    for a in args:
        if not is_value(a):
            continue
        if acc is None:
            acc = a
            continue
        va, vb = state.unify(acc, a, node)
        acc = state.emit1(cls(), [va, vb], node)
    return acc


def convert(state: CompileState, func: Any, args: list[Any], node: ast.AST) -> Any:
    """``int``/``float``/``bool`` of a kernel value (``int`` truncates toward zero)."""
    if len(args) != 1 or (not is_tile(args[0]) and not is_value(args[0])):
        raise state.error(f"{func.__name__}() takes one value", node)
    v = state.as_tile(args[0], node)
    kind = kind_of(v.type.element)  # type: ignore[attr-defined]
    if func is builtins.bool:
        return state.as_bool(v, node)
    if func is builtins.float:
        return v if kind == "float" else state.cast(v, F32, node)
    if kind == "float":
        v = state.emit1(tile_compute.Trunc(), [v], node)
    return state.cast(v, INDEX, node)


def inline(state: CompileState, fn: Any, args: list[Any], kwargs: dict[str, Any],
           node: ast.AST) -> Any:
    """Compile a called function's body in place and return its result."""
    if state.depth >= MAX_INLINE_DEPTH:
        raise state.error(f"function {fn.__name__} is inlined more than {MAX_INLINE_DEPTH} "
                          "deep (recursion is not supported in kernels)", node)
    fdef, file, first = function_source(fn)
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        raise state.error(f"{fn.__name__}(): {err}", node) from None
    bound.apply_defaults()
    saved = (state.env, state.scopes, state.file, state.first_line)
    state.env = dict(bound.arguments)
    state.scopes = [scope_of(fn)]
    state.file, state.first_line = file, first
    state.depth += 1
    try:
        result = stmts(state, fdef.body, top=True)
    finally:
        state.depth -= 1
        state.env, state.scopes, state.file, state.first_line = saved
    return result


__all__ = ["MAX_INLINE_DEPTH", "function_source", "inline", "is_inlined", "scope_of"]
