"""PTX declarations (PTX ISA sec. 5.1, 5.2, 7.1): variables with their state space,
alignment, type and length, kernel parameters and their offsets, and the layout of
a kernel's shared window."""

from __future__ import annotations

import re

from tessera.arch.limits import SHARED_BASE
from tessera.errors import Loc
from tessera.ir.dialects.target.cfg import GlobalVar, KernelParam, SharedVar
from tessera.ir.text.ptx.lexer import (
    PtxSyntaxError,
    PtxUnsupportedError,
    Statement,
    parse_float_bits,
    parse_int,
    split_operands,
)

#: where the launch places the module's variables (tessera.interp.target.memory.state)
GLOBAL_BASE = 0x1000_0000
GLOBAL_STRIDE = 0x1000_0000

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
    end = max((v.address + v.size for v in placed), default=SHARED_BASE)
    address = -(-end // align) * align
    size = 0 if dynamic else SIZES[elem] * max(length, 1)
    return SharedVar(name, address, size, align, dynamic)


def layout(module_vars: list[SharedVar], local: list[Statement]) -> list[SharedVar]:
    """A kernel's shared window: the module's and then the kernel's static variables in
    declaration order, each at its alignment, then the dynamic (``.extern``) ones, from
    shared address :data:`~tessera.arch.limits.SHARED_BASE` (the kilobyte below it is
    reserved for system use)."""
    placed: list[SharedVar] = []
    dynamic: list[SharedVar] = []
    every = [(v.name, v, None) for v in module_vars] + [("", None, st) for st in local]
    for _, var, st in every:
        if st is not None:
            var = shared_var(st.text, st.loc, [])
        assert var is not None
        (dynamic if var.dynamic else placed).append(var)
    out: list[SharedVar] = []
    end = SHARED_BASE
    for v in placed + dynamic:
        address = -(-end // v.align) * v.align
        out.append(SharedVar(v.name, address, v.size, v.align, v.dynamic))
        end = address + v.size
    return out


def global_var(text: str, loc: Loc, placed: list[GlobalVar]) -> GlobalVar:
    """A module-level ``.global`` / ``.const`` declaration, with an optional
    initializer (``= {1, 2}``, ``= 0f3F800000``), placed after ``placed``."""
    decl, _, init = text.partition("=")
    words = [w for w in decl.split() if w not in (".visible", ".extern", ".weak")]
    space = words[0][1:]
    name, elem, length, align = variable(" ".join(words[1:]), loc, f".{space} variable")
    if length < 0:
        raise PtxUnsupportedError(f"{name}[] without a size", loc=loc)
    count = max(length, 1)
    size = SIZES[elem] * count
    data = bytearray(size)
    if init.strip():
        values = [v.strip() for v in init.strip().strip("{}").split(",") if v.strip()]
        width = SIZES[elem]
        if len(values) > count:
            raise PtxSyntaxError(f"{len(values)} initial values for {count} elements of "
                                 f"{name}", loc=loc)
        for k, v in enumerate(values):
            number = parse_int(v)
            if number is None:
                bits = parse_float_bits(v)
                if bits is None or bits[1] != 8 * width:
                    raise PtxUnsupportedError(f"initial value {v!r} of {name}", loc=loc)
                number = bits[0]
            data[k * width:(k + 1) * width] = (number & ((1 << 8 * width) - 1)).to_bytes(
                width, "little")
    address = GLOBAL_BASE + GLOBAL_STRIDE * len(placed)
    return GlobalVar(name, address, size, align, space, bytes(data))


__all__ = ["GLOBAL_BASE", "GLOBAL_STRIDE", "SIZES", "global_var", "layout", "read_params",
           "shared_var", "variable"]
