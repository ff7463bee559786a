"""PTX declarations (PTX ISA sec. 5.1, 5.2, 7.1): variables with their state space,
alignment, type and length, kernel parameters and their offsets, and the layout of
a kernel's shared window."""

from __future__ import annotations

import re

from tessera.errors import Loc
from tessera.ir.dialects.target.cfg import KernelParam, SharedVar
from tessera.ir.text.ptx.lexer import PtxSyntaxError, PtxUnsupportedError, Statement, split_operands

SIZES = {"b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
          "b32": 4, "u32": 4, "s32": 4, "f32": 4, "b64": 8, "u64": 8, "s64": 8, "f64": 8,
          "f16x2": 4, "bf16x2": 4, "pred": 1}
_DECL = re.compile(r"^(?P<name>[\w$%.]+)\s*(?:\[(?P<n>\d*)\])?$")


def variable(text: str, loc: Loc, what: str) -> tuple[str, str, int, int]:
    """``[.align A] .type name[N]`` as (name, type, element count or -1 for [], align)."""
    words = text.split()
    align, elem, rest = 0, "", []
    pointer = False  # after .ptr, .align is the pointee's alignment
    i = 0
    while i < len(words):
        w = words[i]
        if w == ".align":
            align = align if pointer else int(words[i + 1])
            i += 2
            continue
        pointer = pointer or w == ".ptr"
        if w.startswith(".") and w[1:] in SIZES and not elem:
            elem = w[1:]
        elif w.startswith(".") and w[1:] in ("ptr", "global", "shared", "const", "local"):
            pass
        else:
            rest.append(w)
        i += 1
    m = _DECL.match("".join(rest))
    if not elem or not m:
        raise PtxSyntaxError(f"cannot read {what} declaration '{text}'", loc=loc)
    n = m.group("n")
    length = 0 if n is None else (-1 if n == "" else int(n))
    return m.group("name"), elem, length, align or SIZES[elem]


def read_params(text: str, loc: Loc) -> list[KernelParam]:
    inner = text[text.index("(") + 1:text.rindex(")")] if "(" in text else ""
    params: list[KernelParam] = []
    offset = 0
    for part in split_operands(inner, loc) if inner.strip() else []:
        if not part.startswith(".param"):
            raise PtxSyntaxError(f"expected a .param in '{part}'", loc=loc)
        name, elem, length, align = variable(part[len(".param"):], loc, "parameter")
        size = SIZES[elem] * max(length, 1)
        offset = -(-offset // align) * align
        params.append(KernelParam(name, elem, offset, size, align, max(length, 0)))
        offset += size
    return params


def shared_var(text: str, loc: Loc, placed: list[SharedVar]) -> SharedVar:
    """A ``.shared`` / ``.extern .shared`` declaration placed after ``placed``."""
    words = text.split()
    dynamic = words[0] == ".extern"
    if dynamic:
        words = words[1:]
    if not words or words[0] != ".shared":
        raise PtxUnsupportedError(f"declaration '{text}'", loc=loc)
    name, elem, length, align = variable(" ".join(words[1:]), loc, "shared variable")
    if length < 0 and not dynamic:
        raise PtxSyntaxError(f"shared variable {name}[] needs .extern", loc=loc)
    end = max((v.address + v.size for v in placed), default=0)
    address = -(-end // align) * align
    size = 0 if dynamic else SIZES[elem] * max(length, 1)
    return SharedVar(name, address, size, align, dynamic)


def layout(module_vars: list[SharedVar], local: list[Statement]) -> list[SharedVar]:
    """A kernel's shared window: the module's and then the kernel's static variables in
    declaration order, each at its alignment, then the dynamic (``.extern``) ones."""
    placed: list[SharedVar] = []
    dynamic: list[SharedVar] = []
    every = [(v.name, v, None) for v in module_vars] + [("", None, st) for st in local]
    for _, var, st in every:
        if st is not None:
            var = shared_var(st.text, st.loc, [])
        assert var is not None
        (dynamic if var.dynamic else placed).append(var)
    out: list[SharedVar] = []
    end = 0
    for v in placed + dynamic:
        address = -(-end // v.align) * v.align
        out.append(SharedVar(v.name, address, v.size, v.align, v.dynamic))
        end = address + v.size
    return out


__all__ = ["SIZES", "layout", "read_params", "shared_var", "variable"]
