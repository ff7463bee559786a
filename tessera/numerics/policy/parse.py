"""Parsing of policy strings such as ``"fp8_e4m3 @accum(fp32) @loss_scale(128)"``.

A policy string is a Python expression (``@`` is matrix multiplication), so it is
parsed with :mod:`ast` and each piece is checked by hand: nothing is evaluated.
"""

from __future__ import annotations

import ast
from typing import Any

from tessera.errors import DTypeError, PolicyError
from tessera.numerics.formats.dtypes import DType, dtype
from tessera.numerics.policy.modifiers import Modifier, Policy, accum, loss_scale, stochastic_round

_FORM = "write e.g. 'bf16 @accum(f32) @stochastic_round(seed=7) @loss_scale(128)'"
_PREFIXES = ("ts", "tessera")


def _name(node: ast.AST) -> str | None:
    """The bare name of ``f32``, ``ts.f32`` or ``"f32"``; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in _PREFIXES):
        return node.attr
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _token(text: str, node: ast.AST) -> str:
    return ast.get_source_segment(text, node) or ast.dump(node)


def _format(text: str, node: ast.AST) -> DType:
    name = _name(node)
    if name is None:
        raise PolicyError(f"{_token(text, node)!r} in policy {text!r} is not a format name",
                          hint=_FORM)
    try:
        return dtype(name)
    except DTypeError as err:
        raise DTypeError(f"unknown format {name!r} in policy {text!r}", hint=err.hint) from None


def _literal(text: str, node: ast.AST, what: str) -> Any:
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise PolicyError(f"{what} argument {_token(text, node)!r} in policy {text!r} "
                          "is not a literal number", hint=_FORM) from None


def _modifier(text: str, node: ast.AST) -> Modifier:
    name = _name(node)
    if name is not None:
        if name == "stochastic_round":
            return stochastic_round
        if name in ("accum", "loss_scale"):
            raise PolicyError(f"@{name} in policy {text!r} needs an argument",
                              hint=f"write @{name}(...)")
        raise PolicyError(f"unknown modifier {name!r} in policy {text!r}", hint=_FORM)
    if not isinstance(node, ast.Call) or _name(node.func) is None:
        raise PolicyError(f"{_token(text, node)!r} in policy {text!r} is not a modifier",
                          hint=_FORM)
    func = _name(node.func)
    args, kwargs = node.args, {kw.arg: kw.value for kw in node.keywords}
    if func == "accum" and len(args) == 1 and not kwargs:
        return accum(_format(text, args[0]))
    if func == "loss_scale" and len(args) == 1 and not kwargs:
        return loss_scale(_literal(text, args[0], "loss_scale"))
    if func == "stochastic_round" and len(args) + len(kwargs) <= 1 and set(kwargs) <= {"seed"}:
        seed_node = args[0] if args else kwargs.get("seed")
        seed = 0 if seed_node is None else _literal(text, seed_node, "stochastic_round")
        return stochastic_round(seed)
    if func in ("accum", "loss_scale", "stochastic_round"):
        raise PolicyError(f"wrong arguments in {_token(text, node)!r} in policy {text!r}",
                          hint=_FORM)
    raise PolicyError(f"unknown modifier {func!r} in policy {text!r}", hint=_FORM)


def parse_policy(text: str) -> DType | Policy:
    """Parse a format or policy string; the result equals the value built with ``@``.

    ``"fp32"`` gives the DType f32; ``"bf16 @accum(f32)"`` gives
    ``bf16 @accum(f32)``. Names may carry a ``ts.`` prefix. An unknown format raises
    DTypeError, anything else malformed PolicyError; both name the bad token.
    """
    if not isinstance(text, str):
        raise PolicyError(f"parse_policy takes a string, not {text!r}", hint=_FORM)
    source = text.strip()
    try:
        node = ast.parse(source, mode="eval").body
    except SyntaxError:
        raise PolicyError(f"cannot parse policy {text!r}", hint=_FORM) from None
    modifiers: list[ast.AST] = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
        modifiers.append(node.right)
        node = node.left
    base = _format(source, node)
    if not modifiers:
        return base
    policy = Policy(base)
    for mod in reversed(modifiers):
        policy = policy @ _modifier(source, mod)
    return policy
