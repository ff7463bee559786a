"""PTX register instructions as Target IR (PTX ISA sec. 9.7.1-9.7.9): integer and float
arithmetic, comparisons, selection, conversions, moves and bit manipulation.

Float rounding: ``.rn`` (the default of ``add``/``sub``/``mul`` without a modifier) and
``.rz``/``.rm``/``.rp`` (f32 and f64 arithmetic, ``div``, ``sqrt``, ``rcp``, ``fma``) are
modelled bit-exactly, as is ``.ftz``. ``.approx`` instructions (``ex2``, ``lg2``,
``rcp``, ``sqrt``, ``div``) and ``div.full`` compute the correctly rounded result, which
hardware approximates (documented, not bit-exact).
"""

from __future__ import annotations

from collections.abc import Callable

from tessera.ir.dialects.target import FP8X2, REG_TYPES, ptx_ops
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.ops import DIRECTED
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.isa_types import exotic
from tessera.ir.text.ptx.lexer import parse_int

Handler = Callable[[InstrBuilder, list[str], list[str]], None]
HANDLERS: dict[str, Handler] = {}
UNSIGNED_CMP = {"lo": "lt", "ls": "le", "hi": "gt", "hs": "ge"}
_WIDER = {"u16": "u32", "s16": "s32", "u32": "u64", "s32": "s64", "b32": "b64"}


def handler(*names: str) -> Callable[[Handler], Handler]:
    """Register a handler for the opcodes ``names``."""
    def register(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn
    return register


def ptx_type(b: InstrBuilder, mods: list[str]) -> str:
    """The instruction's (last) type modifier."""
    if not mods:
        raise b.syntax("missing type")
    t = mods[-1]
    if t in ("u8", "s8", "b8", "tf32", "b128") or exotic(t):  # PTX types the reader does
        raise b.unsupported(f"the .{t} type")  # not model (e4m3x2, ue8m0x2 ...)
    if t not in REG_TYPES:
        raise b.syntax(f"unknown type .{t}")
    return t


def count(b: InstrBuilder, ops: list[str], n: int) -> None:
    """Fault unless there are ``n`` operands."""
    if len(ops) != n:
        raise b.syntax(f"expected {n} operands, got {len(ops)}")


#: the float instructions that also round toward zero, -inf or +inf
_DIRECTED_OPS = ("add", "sub", "mul", "div", "sqrt", "rcp")
#: the float instructions with .approx forms
_APPROXIMATE = {"div", "sqrt", "rcp", "ex2", "lg2", "rsqrt", "tanh", "sin", "cos"}


def _float_mode(b: InstrBuilder, flags: list[str], op: str, t: str = "") -> tuple[str, bool]:
    """The mode of a float instruction and whether it flushes subnormals (``.ftz``); an
    approximate unary function keeps ``.ftz`` in its mode (``approx.ftz``), the form
    tessera's own lowering writes. ``add``/``sub``/``mul``/``div``/``sqrt``/``rcp`` of
    f32 and f64 also round toward zero, -inf or +inf (libdevice's functions do)."""
    mode = ""
    for f in flags:
        if f == "rn":
            mode = mode or "rn"
        elif f in DIRECTED and op in _DIRECTED_OPS and t in ("f32", "f64"):
            mode = f
        elif f in DIRECTED and op in _DIRECTED_OPS and t:
            raise b.syntax(f"{op}.{t} rounds to nearest only (.rn), not .{f}")
        elif f in ("approx", "full") and op in _APPROXIMATE:
            mode = "approx"
        elif f == "NaN" and op in ("min", "max"):
            mode = "NaN"
        elif f != "ftz":
            raise b.unsupported(f"the .{f} modifier")
    if op == "div" and not mode:
        raise b.syntax("div of floats needs .rn, .full or .approx")
    ftz = "ftz" in flags
    if mode == "approx" and ftz and op != "div":
        return "approx.ftz", False
    return mode, ftz


@handler("add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr",
         "copysign")
def _binary(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    op = b.head
    t = ptx_type(b, mods)
    count(b, ops, 3)
    flags = mods[:-1]
    kind = REG_TYPES[t][1]
    mode = ""
    ftz = False
    if kind == "f":
        mode, ftz = _float_mode(b, flags, op, t)
        if op in ("add", "sub", "mul", "div") and mode == "":
            mode = "rn"
    else:
        for f in flags:
            if f in ("lo", "hi", "wide") and op == "mul":
                mode = f
            else:
                raise b.unsupported(f"the .{f} modifier")
    x = b.read(ops[1], t)
    y = b.read(ops[2], "u32" if op in ("shl", "shr") else t)
    (d,) = b.emit(target_ops.Binary(op, t, mode, ftz), [x, y])
    b.write(ops[0], d)


@handler("mad")
def _mad(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    t = ptx_type(b, mods)
    count(b, ops, 4)
    flags = mods[:-1]
    if REG_TYPES[t][1] == "f":
        if flags not in (["rn"],):
            raise b.unsupported("mad of floats without .rn (or with other modifiers)")
        args = [b.read(o, t) for o in ops[1:]]
        (d,) = b.emit(target_ops.Fma(t), args)
        b.write(ops[0], d)
        return
    if len(flags) != 1 or flags[0] not in ("lo", "hi", "wide"):
        raise b.unsupported(f"mad with modifiers {'.'.join(flags) or '(none)'}")
    mode = flags[0]
    x, y = b.read(ops[1], t), b.read(ops[2], t)
    (p,) = b.emit(target_ops.Binary("mul", t, mode), [x, y])
    wide = _WIDER.get(t, t) if mode == "wide" else t
    c = b.read(ops[3], wide)
    (d,) = b.emit(target_ops.Binary("add", wide), [p, c])
    b.write(ops[0], d)


@handler("fma")
def _fma(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    t = ptx_type(b, mods)
    count(b, ops, 4)
    flags = mods[:-1]
    rnd = [f for f in flags if f != "ftz"]
    if rnd != ["rn"] and not (t in ("f32", "f64") and rnd in (["rz"], ["rm"], ["rp"])):
        raise b.unsupported("fma other than fma.rn{.ftz}, rz, rm and rp of f32 and f64")
    args = [b.read(o, t) for o in ops[1:]]
    (d,) = b.emit(target_ops.Fma(t, "ftz" in flags, rnd[0]), args)
    b.write(ops[0], d)


@handler("neg", "abs", "not", "sqrt", "rcp", "ex2", "lg2", "rsqrt", "tanh", "sin", "cos")
def _unary(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    op = b.head
    t = ptx_type(b, mods)
    count(b, ops, 2)
    mode, ftz = _float_mode(b, mods[:-1], op, t) if REG_TYPES[t][1] == "f" else ("", False)
    if REG_TYPES[t][1] != "f" and mods[:-1]:
        raise b.unsupported("modifiers on an integer instruction")
    if op in ("sqrt", "rcp") and not mode:
        raise b.syntax(f"{op} needs .rn or .approx")
    (d,) = b.emit(target_ops.Unary(op, t, mode, ftz), [b.read(ops[1], t)])
    b.write(ops[0], d)


@handler("popc", "clz", "brev")
def _bits(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    t = ptx_type(b, mods)
    count(b, ops, 2)
    if mods[:-1]:
        raise b.unsupported(f"the .{mods[0]} modifier")
    (d,) = b.emit(ptx_ops.BitCount(b.head, t), [b.read(ops[1], t)])
    b.write(ops[0], d)


@handler("setp")
def _setp(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    t = ptx_type(b, mods)
    flags = [f for f in mods[:-1] if f != "ftz"]  # ptxas takes .ftz before the comparison
    if not flags:
        raise b.syntax("setp needs a comparison")
    cmp = flags[0]
    kind = REG_TYPES[t][1]
    if kind == "u" or kind == "b":
        cmp = UNSIGNED_CMP.get(cmp, cmp)
    combine = flags[1:]
    if combine and combine[0] not in ("and", "or", "xor"):
        raise b.syntax(f"setp takes .and, .or, .xor or .ftz, not .{combine[0]}")
    count(b, ops, 4 if combine else 3)
    x, y = b.read(ops[1], t), b.read(ops[2], t)
    (p,) = b.emit(target_ops.Setp(cmp, t, "ftz" in mods[:-1]), [x, y])
    dests = ops[0].split("|")
    q = None
    if len(dests) == 2:
        (q,) = b.emit(target_ops.Unary("not", "pred"), [p])
    if combine:
        c = b.read(ops[3], "pred")
        (p,) = b.emit(target_ops.Binary(combine[0], "pred"), [p, c])
        if q is not None:
            (q,) = b.emit(target_ops.Binary(combine[0], "pred"), [q, c])
    b.write(dests[0], p)
    if q is not None:
        b.write(dests[1], q)


@handler("selp")
def _selp(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    t = ptx_type(b, mods)
    count(b, ops, 4)
    x, y, p = b.read(ops[1], t), b.read(ops[2], t), b.read(ops[3], "pred")
    (d,) = b.emit(target_ops.Selp(t), [x, y, p])
    b.write(ops[0], d)


@handler("cvt")
def _cvt(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    if len(mods) < 2:
        raise b.syntax("cvt needs two types")
    to, frm = mods[-2], mods[-1]
    if to in ("u8", "s8") or frm in ("u8", "s8"):
        _cvt_byte(b, mods, ops)
        return
    if to in FP8X2 or frm in FP8X2:
        _cvt_fp8(b, mods, ops)
        return
    for t in (to, frm):
        ptx_type(b, [t])
    _cvt_source(b, to, frm, ops)
    rnd = sat = ""
    clamp = "sat" in mods and REG_TYPES[to][1] == "f"  # to [0, 1] after converting
    ftz = clamp and to == frm == "f32" and "ftz" in mods and len(mods) == 4
    for f in mods[:-2]:
        if f in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi"):
            rnd = f
        elif f == "satfinite" or (f == "sat" and not clamp):
            sat = f
        elif not ((clamp and f == "sat") or (ftz and f == "ftz")):
            raise b.unsupported(f"cvt with .{f}")
    if to in ("f16x2", "bf16x2"):
        count(b, ops, 3)
        b.relaxed = to == "f16x2"  # ptxas: a bf16x2 pair's sources are no wider than f32
        args = [b.read(ops[1], frm), b.read(ops[2], frm)]
    else:
        count(b, ops, 2)
        args = [b.read(ops[1], frm)]
    (d,) = args if to == frm and not rnd and not sat else b.emit(
        target_ops.Cvt(to, frm, rnd, sat), args)
    if clamp:  # max and min take the number beside a NaN and -0 as below +0: NaN, -0 to +0
        for op, bound in (("max", 0.0), ("min", 1.0)):
            (d,) = b.emit(target_ops.Binary(op, to, ftz=ftz), [d, b.const(bound, to)])
    b.write(ops[0], d)


def _cvt_source(b: InstrBuilder, to: str, frm: str, ops: list[str]) -> None:
    """What ptxas refuses of a ``cvt``'s sources: a special register converted to other
    than an integer, an immediate of a 16-bit float or a pair."""
    for token in (o.strip() for o in ops[1:]):
        if b.is_register(token):
            continue
        if token.startswith("%") and (to in FP8X2 or REG_TYPES[to][1] == "f"):
            raise b.syntax(f"special register {token}: cvt converts one to an integer only")
        if frm in ("f16", "bf16", "f16x2", "bf16x2") or frm in FP8X2:
            raise b.syntax(f"cvt takes its .{frm} source in a register, not {token}")


def _cvt_fp8(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cvt`` to or from a pair of fp8 values in a 16-bit register (the ISA checks of
    :func:`tessera.ir.text.ptx.isa_types.fp8_problem` have passed)."""
    to, frm = mods[-2], mods[-1]
    _cvt_source(b, to, frm, ops)
    b.relaxed = False  # ptxas wants every operand of an fp8 pair's cvt at its own width
    pair = ops[0] if to in FP8X2 else ops[1] if len(ops) > 1 else ""
    name = b.scope.resolve(pair.strip())
    if name is not None and REG_TYPES[b.scope.registers[name]][1] == "f":
        raise b.syntax(f"register {pair.strip()} is a .{b.scope.registers[name]} register: "
                       "an fp8 pair is a .b16 (or .u16, .s16) operand")
    if "relu" in mods:
        raise b.unsupported("cvt with .relu")
    if to in FP8X2:
        count(b, ops, 3 if frm == "f32" else 2)
        args = [b.read(x, frm) for x in ops[1:]]
        (d,) = b.emit(target_ops.Cvt(to, frm, "rn", "satfinite"), args)
    else:
        count(b, ops, 2)
        (d,) = b.emit(target_ops.Cvt(to, frm, "rn"), [b.read(ops[1], "b16")])
    b.write(ops[0], d)


def _cvt_byte(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cvt`` to or from an 8-bit integer type (kept in a wider register): the low
    byte, zero- or sign-extended."""
    to, frm = mods[-2], mods[-1]
    count(b, ops, 2)
    b.any_width = True  # read and written as 32 bits, whatever the registers' widths
    floats = [t for t in (to, frm) if t not in ("u8", "s8") and
              REG_TYPES.get(t, (0, "f"))[1] == "f"]
    if floats or mods[:-2]:
        raise b.unsupported(f"cvt.{'.'.join(mods)}")
    byte = frm if frm in ("u8", "s8") else to
    signed = byte == "s8"
    src = b.read(ops[1], "s32" if signed else "u32")
    zero, eight = b.const(0, "u32"), b.const(8, "u32")
    (d,) = b.emit(ptx_ops.Bfe("s32" if signed else "u32"), [src, zero, eight])
    b.write(ops[0], d)  # extended into the destination by the byte's signedness


@handler("cvta")
def _cvta(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    count(b, ops, 2)
    to = bool(mods) and mods[0] == "to"
    rest = mods[1:] if to else mods
    if len(rest) != 2 or rest[1] not in ("u64", "u32"):
        raise b.syntax("expected cvta{.to}.<space>.u64")
    if rest[1] == "u32":
        raise b.unsupported("32-bit generic addresses")
    space = rest[0].split("::")[0]
    (d,) = b.emit(ptx_ops.Cvta(space, to), [b.read(ops[1], "u64")])
    b.write(ops[0], d)


@handler("mov")
def _mov(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    t = ptx_type(b, mods)
    count(b, ops, 2)
    dst, src = ops
    if "{" in dst + src and REG_TYPES[t][1] != "b":
        raise b.syntax(f"mov packs and splits registers as .b{REG_TYPES[t][0]}, not .{t}")
    if "{" in dst + src:  # pack registers into one, first in the low bits, or split one
        packing = src.strip().startswith("{")
        parts = [x.strip() for x in (src if packing else dst).strip()[1:-1].split(",")]
        width = REG_TYPES[t][0] // len(parts)
        elem = {16: "b16", 32: "b32"}.get(width)
        if elem is None:
            if wrong := [p for p in parts if b.is_register(p) and
                         REG_TYPES[b.scope.registers[b.register(p)]][0] != width]:
                raise b.syntax(f"mov.{t} of {len(parts)} parts moves {width}-bit parts; "
                               f"{wrong[0]} is no {width}-bit register")
            raise b.unsupported(f"mov of .{t} in {len(parts)} parts")
        if packing:
            (d,) = b.emit(target_ops.Pack(t), [b.element(p, elem) for p in parts])
            b.write(dst, d)
            return
        outs = b.emit(target_ops.Unpack(elem, len(parts)), [b.read(src, t)])
        for p, v in zip(parts, outs):
            b.write(p, v)
        return
    b.write(dst, b.read(src, t))


@handler("shf")
def _shf(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    count(b, ops, 4)
    if len(mods) != 3 or mods[0] not in ("l", "r") or mods[1] not in ("wrap", "clamp") \
            or mods[2] != "b32":
        raise b.syntax("expected shf.{l,r}.{wrap,clamp}.b32")
    args = [b.read(o, "b32") for o in ops[1:]]
    (d,) = b.emit(ptx_ops.Shf(mods[0] == "l", mods[1] == "clamp"), args)
    b.write(ops[0], d)


@handler("prmt")
def _prmt(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    count(b, ops, 4)
    if mods != ["b32"]:
        raise b.unsupported("prmt modes other than the default")
    args = [b.read(o, "b32") for o in ops[1:]]
    (d,) = b.emit(ptx_ops.Prmt(), args)
    b.write(ops[0], d)


@handler("lop3")
def _lop3(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    count(b, ops, 5)
    lut = parse_int(ops[4])
    if mods != ["b32"] or lut is None:
        raise b.unsupported("lop3 forms other than lop3.b32 with a constant table")
    args = [b.read(o, "b32") for o in ops[1:4]]
    (d,) = b.emit(ptx_ops.Lop3(lut & 0xFF), args)  # ptxas keeps the low 8 bits
    b.write(ops[0], d)


@handler("bfe")
def _bfe(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    t = ptx_type(b, mods)
    count(b, ops, 4)
    args = [b.read(ops[1], t), b.read(ops[2], "u32"), b.read(ops[3], "u32")]
    (d,) = b.emit(ptx_ops.Bfe(t), args)
    b.write(ops[0], d)


@handler("bfi")
def _bfi(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    t = ptx_type(b, mods)
    count(b, ops, 5)
    args = [b.read(ops[1], t), b.read(ops[2], t), b.read(ops[3], "u32"),
            b.read(ops[4], "u32")]
    (d,) = b.emit(ptx_ops.Bfi(t), args)
    b.write(ops[0], d)


__all__ = ["HANDLERS", "count", "handler", "ptx_type"]
