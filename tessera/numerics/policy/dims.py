"""Dimension expressions of ``Tensor[...]`` annotations: ``"K"``, ``128``, ``"B*H"``.

A dim is an int, a symbol name, or a :class:`DimExpr` over symbols and ints with
``+ - * //``. Expressions are parsed with :mod:`ast` (nothing is evaluated by Python)
and printed in a normal form without spaces, so ``"B * H"`` and ``"B*H"`` are equal.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Literal, Union

from tessera.errors import DimBindingError

_OPS: dict[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//"}
_PREC = {"+": 1, "-": 1, "*": 2, "//": 2}
_HINT = 'a dim is an int >= 0, a name ("K") or names and ints combined with + - * // ("B*H")'


@dataclass(frozen=True)
class DimExpr:
    """``lhs op rhs`` over dims; ``op`` is one of ``+ - * //``."""

    op: str
    lhs: Dim
    rhs: Dim

    def symbols(self) -> set[str]:
        """The symbol names the expression uses."""
        return {s for side in (self.lhs, self.rhs) for s in _symbols(side)}

    def __str__(self) -> str:
        prec = _PREC[self.op]
        left = _text(self.lhs)
        if isinstance(self.lhs, DimExpr) and _PREC[self.lhs.op] < prec:
            left = f"({left})"
        right = _text(self.rhs)
        if isinstance(self.rhs, DimExpr):
            inner = _PREC[self.rhs.op]
            # a-(b+c), a//(b*c), a*(b+c) need parentheses; a+(b+c) and a*(b*c) do not.
            same_assoc = self.op == self.rhs.op and self.op in ("+", "*")
            if inner < prec or (inner == prec and not same_assoc):
                right = f"({right})"
        return f"{left}{self.op}{right}"


Dim = Union[int, str, DimExpr]  # noqa: UP007 - a runtime alias, also on 3.10


def _symbols(d: Dim) -> set[str]:
    if isinstance(d, DimExpr):
        return d.symbols()
    return {d} if isinstance(d, str) else set()


def _text(d: Dim) -> str:
    return str(d)


def _convert(node: ast.AST, text: str) -> Dim:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return DimExpr(_OPS[type(node.op)], _convert(node.left, text), _convert(node.right, text))
    bad = ast.get_source_segment(text, node) or text
    raise DimBindingError(f"{bad!r} in dim {text!r} is not a name, an int or + - * //",
                          hint=_HINT)


def parse_dim(text: str) -> Dim:
    """Parse a dim string: a name, an int literal, or an expression (normal form)."""
    source = text.strip()
    if not source:
        raise DimBindingError("an empty string is not a dim", hint=_HINT)
    if source.isidentifier():
        return source
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        raise DimBindingError(f"cannot parse dim {text!r}", hint=_HINT) from None
    return _convert(node, source)


def evaluate(d: Dim, env: dict[str, int], *, composite: bool = True) -> int | None:
    """The value of a dim under ``env``; None while any of its symbols is unbound.

    An expression bound as a whole (``env["B*H"]``) gives that value unless
    ``composite`` is False, which computes it from its symbols.
    """
    if isinstance(d, int):
        return d
    if isinstance(d, str):
        return env.get(d)
    if composite and str(d) in env:
        return env[str(d)]
    lhs, rhs = evaluate(d.lhs, env), evaluate(d.rhs, env)
    if lhs is None or rhs is None:
        return None
    if d.op == "+":
        return lhs + rhs
    if d.op == "-":
        return lhs - rhs
    if d.op == "*":
        return lhs * rhs
    if rhs == 0:
        raise DimBindingError(f"dim '{d}' divides by zero", hint="check the dim sizes")
    return lhs // rhs


def solve(d: Dim, target: int, env: dict[str, int]) -> dict[str, int] | Literal[False] | None:
    """Bindings for the one unbound symbol of ``d`` that make it equal ``target``.

    None when ``d`` cannot be solved that way (several unbound symbols, or a floor
    division, which has many solutions); False when no size works.
    """
    if isinstance(d, int):
        return {} if d == target else False
    if isinstance(d, str):
        if d in env:
            return {} if env[d] == target else False
        return {d: target} if target >= 0 else False
    lhs, rhs = evaluate(d.lhs, env), evaluate(d.rhs, env)
    if (lhs is None) == (rhs is None) or d.op == "//":
        return None
    known = lhs if lhs is not None else rhs
    assert known is not None
    unknown = d.rhs if lhs is not None else d.lhs
    if d.op == "+":
        return solve(unknown, target - known, env)
    if d.op == "-":
        return solve(d.lhs, target + known, env) if lhs is None else \
            solve(d.rhs, known - target, env)
    if known == 0:  # x * 0: any x when the target is 0, none otherwise
        return None if target == 0 else False
    if target % known:
        return False
    return solve(unknown, target // known, env)
