"""The kernel compiler's rule tables are complete, and what they leave out is refused.

Every Python statement and expression class a kernel body may use has a rule in
``STMT_RULES`` / ``EXPR_RULES`` (the lists below are the documented kernel language;
``return`` is structure that ``stmts`` handles), every ``ts.tile.*`` name but ``range``
has one in ``API_RULES``, and every other statement or expression class of this
Python's ``ast`` module, written in a kernel, is a ``KernelCompileError`` naming the
class and the user's file and line.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.frontend.kernel.compiler.rules import API_RULES, EXPR_RULES, STMT_RULES
from tessera.frontend.kernel.errors import KernelCompileError

#: the kernel language: statements and expressions with a rule
STATEMENTS = {ast.Expr, ast.Pass, ast.Assert, ast.Assign, ast.AnnAssign, ast.AugAssign,
              ast.If, ast.For, ast.While}
EXPRESSIONS = {ast.Constant, ast.Name, ast.Attribute, ast.Tuple, ast.List, ast.BinOp,
               ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp, ast.Subscript, ast.Call}

#: kernel body lines per refused class (``x`` is the kernel's f32 vector): the refused
#: construct is on the first line or on the one marked ``# refused``; a body with
#: ``async`` or ``await`` is compiled as an ``async def`` kernel
REFUSED = {
    "FunctionDef": "def f(): pass",
    "AsyncFunctionDef": "async def f(): pass",
    "ClassDef": "class C: pass",
    "Delete": "del x",
    "AsyncFor": "async for i in x: pass",
    "With": "with x: pass",
    "AsyncWith": "async with x: pass",
    "Match": "match 1:\n    case 1: pass",
    "Raise": "raise ValueError",
    "Try": "try: pass\nexcept ValueError: pass",
    "TryStar": "try: pass\nexcept* ValueError: pass",
    "Import": "import math",
    "ImportFrom": "from math import pi",
    "Global": "global g",
    "Break": "while x[0] > 0.0:\n    break  # refused",
    "Continue": "while x[0] > 0.0:\n    continue  # refused",
    "TypeAlias": "type T = int",
    "NamedExpr": "y = (z := 1)",
    "Lambda": "y = lambda: 1",
    "Dict": "y = {}",
    "Set": "y = {1}",
    "ListComp": "y = [i for i in (1, 2)]",
    "SetComp": "y = {i for i in (1, 2)}",
    "DictComp": "y = {i: i for i in (1, 2)}",
    "GeneratorExp": "y = tuple(i for i in (1, 2))",
    "Await": "y = await x",
    "Yield": "yield 1",
    "YieldFrom": "yield from (1, 2)",
    "JoinedStr": "y = f'{1}'",
    "Starred": "y = (*(1, 2),)",
    "Slice": "y = (1, 2, 3)[0:2]",
}
#: classes no kernel line can reach on its own, and why
UNREACHABLE = {
    "Return": "structure: ``stmts`` takes a final return as the result, refuses others",
    "FormattedValue": "only inside an f-string (JoinedStr), which is refused first",
    "Nonlocal": "a nonlocal at the top of a function is a SyntaxError in Python itself",
}


def _concrete(base: type) -> list[type]:
    """The node classes of ``base`` in this Python (deprecated aliases such as
    ``ast.Num``, subclasses of ``ast.Constant``, are left out)."""
    found = []
    for cls in base.__subclasses__():
        if not issubclass(cls, ast.Constant) or cls is ast.Constant:
            found.append(cls)
    return found


def test_the_tables_hold_the_kernel_language() -> None:
    assert set(STMT_RULES) == STATEMENTS
    assert set(EXPR_RULES) == EXPRESSIONS


def test_every_tile_api_name_has_a_rule_but_range() -> None:
    # ``range`` is a loop's structure (``for i in ts.tile.range(...)``), lowered by ``for``
    assert set(API_RULES) == set(ts.tile.API) - {"range"}
    # the memory accesses take their reference unevaluated (a masked one is no view)
    assert all(rule.raw == (name in ("load_vector", "store_vector", "load", "store"))
               for name, rule in API_RULES.items())


def test_every_other_node_class_has_a_refusal_line_or_a_reason() -> None:
    names = {cls.__name__ for cls in _concrete(ast.stmt) + _concrete(ast.expr)}
    ruled = {cls.__name__ for cls in STATEMENTS | EXPRESSIONS}
    missing = names - ruled - set(REFUSED) - set(UNREACHABLE)
    assert not missing, f"no refusal line for {sorted(missing)}"


def _kernel_module(tmp_path: Path, name: str, line: str) -> tuple[object, Path, int]:
    """A module file whose kernel's body is ``line``; the kernel and the line of the
    refused construct in the file."""
    is_async = "async" in line or "await" in line
    body = textwrap.indent(line, "    ")
    source = ("import tessera as ts\n\n\n@ts.kernel\n"
              f"{'async ' if is_async else ''}def bad(x: ts.Tensor['N', ts.f32]):\n"
              f"{body}\n")
    path = tmp_path / f"refused_{name.lower()}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    marked = [k for k, text in enumerate(line.splitlines()) if text.endswith("# refused")]
    return module.bad, path, 6 + (marked[0] if marked else 0)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_refused_node_is_an_error_at_its_line(tmp_path: Path, name: str) -> None:
    if not hasattr(ast, name):
        pytest.skip(f"ast.{name} is not in Python {sys.version_info[:2]}")
    kernel, path, line = _kernel_module(tmp_path, name, REFUSED[name])
    kind = "statements" if issubclass(getattr(ast, name), ast.stmt) else "expressions"
    with pytest.raises(KernelCompileError,
                       match=f"{name} {kind} are not supported in kernels") as info:
        kernel(np.ones(4, np.float32))
    assert Path(info.value.loc.file) == path
    assert info.value.loc.line == line
    assert f"{path}:{line}" in str(info.value)


def test_range_outside_a_loop_header_is_refused_at_its_line(tmp_path: Path) -> None:
    kernel, path, line = _kernel_module(tmp_path, "range", "r = ts.tile.range()")
    with pytest.raises(KernelCompileError, match="used as a loop range only") as info:
        kernel(np.ones(4, np.float32))
    assert (Path(info.value.loc.file), info.value.loc.line) == (path, line)
