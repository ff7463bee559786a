"""``tessera explain FILE.py:FUNC [--arg ...] --html out.html`` and its Python API.

The function and its example arguments are found as ``tessera ptx`` finds them
(``FILE.py:FUNC``, ``--arg NAME=SHAPE:FORMAT``, ``--const NAME=VALUE``, zeros for a
graph function's statically annotated parameters; a kernel's launch options
``--grid``, ``--tile-shape``, ``--group-size``). :func:`explain_page` and
:func:`write_page` make the same page from Python (the examples and the conformance
report use them).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from tessera.errors import Loc, user_api
from tessera.explain.errors import ExplainError


def kind_of(obj: Any, where: Loc) -> str:
    """``"kernel"`` or ``"graph"``; ExplainError (at ``where``) for anything else."""
    from tessera.frontend.graph.jit import JitFunction
    from tessera.frontend.kernel import Kernel

    if isinstance(obj, Kernel):
        return "kernel"
    if isinstance(obj, JitFunction) or (callable(obj) and hasattr(obj, "__code__")):
        return "graph"
    raise ExplainError(f"{type(obj).__name__} {getattr(obj, '__name__', obj)!r} is neither "
                       "a @ts.kernel nor a graph function", loc=where,
                       hint="name a function decorated with @ts.kernel or @ts.jit, or a plain "
                            "def of tessera ops")


def defined_at(path: str, name: str) -> Loc:
    """The line of ``path`` that binds ``name`` at module level (line 0 if none does)."""
    import ast

    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return Loc(path, 0)
    for node in tree.body:
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        bound = {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        if name in bound:
            return Loc(path, node.lineno)
    return Loc(path, 0)


@user_api
def explain_page(obj: Any, target: str = "sm_90a", **arguments: Any) -> str:
    """The HTML page of a kernel or graph function for these example arguments (and,
    for a kernel, launch keywords such as ``grid`` and ``tile_shape``)."""
    from tessera.errors import user_location
    from tessera.explain.collect import explain
    from tessera.explain.page import render

    kind_of(obj, user_location())
    return render(explain(obj, arguments, target))


@user_api
def write_page(obj: Any, path: str | os.PathLike[str], target: str = "sm_90a",
               **arguments: Any) -> Path:
    """Write :func:`explain_page` to ``path`` atomically; return the path."""
    from tessera.explain.page import write
    from tessera.files import check_writable

    check_writable(path, "page")  # before the work of explaining
    return write(explain_page(obj, target, **arguments), path)


def cmd_explain(args: argparse.Namespace) -> int:
    """Run ``tessera explain``."""
    from tessera.cli import _const, _example, _ints, _load
    from tessera.cli_examples import examples_needed
    from tessera.explain.collect import explain
    from tessera.explain.page import render, write
    from tessera.files import check_writable

    check_writable(args.html, "page")  # before the work of explaining
    obj = _load(args.target, args)
    where = args.where if args.where.line else defined_at(args.where.file,
                                                          args.target.rpartition(":")[2])
    kind = kind_of(obj, where)
    arguments: dict[str, Any] = dict(_example(s) for s in args.arg)
    arguments.update(_const(s) for s in args.const)
    arguments.update(examples_needed(obj, arguments, args.target, args.where))
    if kind == "kernel":
        for key, value in (("grid", _ints(args.grid)), ("tile_shape", _ints(args.tile_shape))):
            if value is not None:
                arguments[key] = value if key != "grid" or len(value) > 1 else value[0]
        if args.group_size:
            arguments["group_size"] = args.group_size
    elif args.grid or args.tile_shape or args.group_size:
        raise ExplainError("--grid, --tile-shape and --group-size are a kernel's options",
                           loc=args.where, hint="a graph function's kernels are scheduled "
                                                "from its graph: drop them")
    html = render(explain(obj, arguments, args.arch))
    path = write(html, args.html)
    print(path, file=sys.stdout)
    return 0


def add_parser(sub: Any) -> None:
    """Add ``explain`` to the command line's subcommands."""
    p = sub.add_parser("explain", help="write a page linking a function's source, IR "
                                       "levels and PTX (with its tile map)")
    p.add_argument("target", help="FILE.py:KERNEL or FILE.py:FUNCTION")
    p.add_argument("--html", required=True, help="the page to write, e.g. out.html")
    p.add_argument("--target", dest="arch", default="sm_90a",
                   help="the PTX target: sm_80, sm_86, sm_89 or sm_90a")
    p.add_argument("--arg", action="append", default=[],
                   help="example array argument NAME=SHAPE:FORMAT, e.g. A=128x64:bf16")
    p.add_argument("--const", action="append", default=[],
                   help="scalar argument or flag NAME=VALUE, e.g. alpha=2.5")
    p.add_argument("--grid", default="", help="a kernel's grid of groups, e.g. 4 or 2,2")
    p.add_argument("--tile-shape", default="", help="a kernel's tile shape, e.g. 64,64,32")
    p.add_argument("--group-size", type=int, default=0, help="a kernel's tiles per group")
    p.set_defaults(run=cmd_explain)


__all__ = ["add_parser", "cmd_explain", "explain_page", "kind_of", "write_page"]
