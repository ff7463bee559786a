"""PTX instructions the reader writes as a few Target IR instructions of their meaning
(PTX ISA 8.x, sections named in each handler): ``cnot``, ``sad``, ``mul24``, ``szext``,
``dp4a``, ``dp2a``, ``bmsk``, ``bfind``, ``fns``, the SIMD video instructions, the
extended-precision carry chains (``add.cc``, ``addc``, ``sub.cc``, ``subc``, ``mad.cc``,
``madc``), and the hints ``prefetch``, ``prefetchu``, ``nanosleep`` and ``pmevent``,
which change no value. nvcc writes them for ``__sad``, ``__mul24``, ``__dp4a``,
``__fns``, ``__vabsdiffu4``, ``__prof_trigger``, CUB's radix sort, the math library's
argument reduction of ``sin``/``cos`` of doubles, prefetches and back-off loops. The
float ones are :mod:`.floats`'.
"""

from __future__ import annotations

from tessera.ir.core import Value
from tessera.ir.dialects.target import RegType, ptx_ops
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.text.ptx.arith import HANDLERS, count, handler, ptx_type
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.isa_types import SIMD
from tessera.ir.text.ptx.lexer import PtxUnsupportedError, parse_int
from tessera.ir.text.ptx.memory import plain_address


@handler("cnot")
def _cnot(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cnot.type d, a`` (sec. 9.7.8.4): ``a == 0 ? 1 : 0``."""
    t = ptx_type(b, mods)
    count(b, ops, 2)
    zero = b.one(target_ops.Setp("eq", t), b.read(ops[1], t), b.const(0, t))
    b.write(ops[0], b.one(target_ops.Selp(t), b.const(1, t), b.const(0, t), zero))


@handler("sad")
def _sad(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``sad.type d, a, b, c`` (sec. 9.7.1.7): ``c + (a < b ? b - a : a - b)``, wrapping."""
    t = ptx_type(b, mods)
    count(b, ops, 4)
    x, y, c = (b.read(o, t) for o in ops[1:])
    less = b.one(target_ops.Setp("lt", t), x, y)
    diff = b.one(target_ops.Selp(t), b.one(target_ops.Binary("sub", t), y, x),
                b.one(target_ops.Binary("sub", t), x, y), less)
    b.write(ops[0], b.one(target_ops.Binary("add", t), c, diff))


@handler("mul24")
def _mul24(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``mul24.{lo,hi}.type d, a, b`` (sec. 9.7.1.5): the 48-bit product of the low 24
    bits (sign-extended for ``s32``); ``lo`` keeps its bits 0-31, ``hi`` its bits 16-47."""
    t = ptx_type(b, mods)
    count(b, ops, 3)
    x, y = (b.bit_field(t, b.read(o, t), 0, 24) for o in ops[1:])
    if mods[0] == "lo":
        b.write(ops[0], b.one(target_ops.Binary("mul", t, "lo"), x, y))
        return
    wide = t[0] + "64"
    product = b.one(target_ops.Binary("mul", t, "wide"), x, y)
    shifted = b.one(target_ops.Binary("shr", wide), product, b.const(16, "u32"))
    b.write(ops[0], b.one(target_ops.Cvt(t, wide, "", ""), shifted))


@handler("szext")
def _szext(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``szext.{clamp,wrap}.type d, a, b`` (sec. 9.7.8.12): the low ``b`` bits of ``a``
    extended by the type's signedness; ``b`` is clamped to 32 or taken modulo 32."""
    t = ptx_type(b, mods)
    count(b, ops, 3)
    if mods[0] not in ("clamp", "wrap"):
        raise b.syntax("szext is szext.clamp or szext.wrap")
    if mods[0] == "clamp":
        n = b.one(target_ops.Binary("min", "u32"), b.read(ops[2], "u32"), b.const(32, "u32"))
    else:
        n = b.bitcast(b.one(target_ops.Binary("and", "b32"), b.read(ops[2], "b32"),
                           b.const(31, "b32")), "u32")
    b.write(ops[0], b.one(ptx_ops.Bfe(t), b.read(ops[1], t), b.const(0, "u32"), n))


@handler("dp4a", "dp2a")
def _dot(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``dp4a.atype.btype d, a, b, c`` (sec. 9.7.1.23): ``c`` plus the products of the
    four bytes of ``a`` and ``b``; ``dp2a.{lo,hi}`` (sec. 9.7.1.24): of the two halves of
    ``a`` and bytes 0-1 (``lo``) or 2-3 (``hi``) of ``b``. Each part is sign-extended
    when its type is ``s32``; the sum wraps, typed ``s32`` when either type is."""
    half = b.head == "dp2a"
    kinds = mods[1:] if half else mods
    if len(kinds) != 2 or any(k not in ("u32", "s32") for k in kinds) or (
            half and mods[0] not in ("lo", "hi")):
        raise b.syntax(f"{b.head} is {b.head}{'.{lo,hi}' if half else ''}.atype.btype with "
                       ".u32 or .s32 types")
    count(b, ops, 4)
    out = "s32" if "s32" in kinds else "u32"
    x, y = b.read(ops[1], kinds[0]), b.read(ops[2], kinds[1])
    total = b.read(ops[3], out)
    first = 2 if half and mods[0] == "hi" else 0
    for k in range(2 if half else 4):
        xa = b.bit_field(kinds[0], x, 16 * k if half else 8 * k, 16 if half else 8)
        yb = b.bit_field(kinds[1], y, 8 * (first + k), 8)
        same = [v if k == out else b.bitcast(v, out) for v, k in zip((xa, yb), kinds)]
        product = b.one(target_ops.Binary("mul", out, "lo"), *same)
        total = b.one(target_ops.Binary("add", out), total, product)
    b.write(ops[0], total)


@handler("prefetch", "prefetchu", "nanosleep", "pmevent")
def _hint(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``prefetch``/``prefetchu`` (sec. 9.7.9.15), ``nanosleep`` (sec. 9.7.13.12) and
    ``pmevent`` (sec. 9.7.19.1, a performance-monitor event, ``__prof_trigger``): hints
    that change no value; their operands are read, and checked, all the same."""
    count(b, ops, 1)
    if b.head == "pmevent":
        event = parse_int(ops[0].strip())
        if mods not in ([], ["mask"]) or event is None or not 0 <= event < (
                1 << 16 if mods else 16):
            raise b.syntax("pmevent takes an event 0-15, pmevent.mask a 16-bit mask")
        return
    if b.head == "nanosleep":
        if mods != ["u32"]:
            raise b.syntax("nanosleep is nanosleep.u32 t")
        b.read(ops[0], "u32")
        return
    space = "shared" if "shared" in mods else ""
    plain_address(b, ops[0], "u32" if space else "u64")


@handler("bfind")
def _bfind(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``bfind{.shiftamt}.type d, a`` (sec. 9.7.1.17): the position of the most
    significant non-sign bit of ``a``, or with ``.shiftamt`` the left shift that brings
    it to the top (``width - 1 - position``); 0xFFFFFFFF when there is none."""
    t = ptx_type(b, mods)
    count(b, ops, 2)
    if mods[:-1] not in ([], ["shiftamt"]):
        raise b.syntax("bfind is bfind{.shiftamt}.type")
    top = b.one(ptx_ops.BitCount("bfind", t), b.read(ops[1], t))
    if mods[:-1]:
        none = b.one(target_ops.Setp("eq", "u32"), top, b.const(0xFFFFFFFF, "u32"))
        shift = b.one(target_ops.Binary("sub", "u32"), b.const(int(t[1:]) - 1, "u32"), top)
        top = b.one(target_ops.Selp("u32"), top, shift, none)
    b.write(ops[0], top)


@handler("bmsk")
def _bmsk(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``bmsk.{clamp,wrap}.b32 d, a, b`` (sec. 9.7.1.25): ``b`` bits set from bit ``a``
    up, as the ISA's semantics compute it: ``a`` and ``b`` taken modulo 32; under
    ``.clamp`` an ``a`` of 32 or more gives 0 and a ``b`` of 32 or more every bit from
    ``a`` up; a mask reaching past bit 31 stops there; a width of 0 gives 0."""
    if len(mods) != 2 or mods[0] not in ("clamp", "wrap") or mods[1] != "b32":
        raise b.syntax("bmsk is bmsk.clamp.b32 or bmsk.wrap.b32")
    count(b, ops, 3)
    a, w = b.read(ops[1], "u32"), b.read(ops[2], "u32")

    def op(name: str, t: str, *args: Value) -> Value:
        return b.one(target_ops.Binary(name, t), *args)
    low = b.const(31, "u32")
    a1, w1 = op("and", "u32", a, low), op("and", "u32", w, low)
    ones = b.const(0xFFFFFFFF, "b32")
    # shl of 32 or more is 0 (sec. 9.7.8.7), which is mask1 when the sum overflows
    mask0, mask1 = (op("shl", "b32", ones, n) for n in (a1, op("add", "u32", a1, w1)))
    empty = b.one(target_ops.Setp("eq", "u32"), w1, b.const(0, "u32"))
    if mods[0] == "clamp":
        big_a, big_w = (b.one(target_ops.Setp("gt", "u32"), v, low) for v in (a, w))
        zero = b.const(0, "b32")
        mask0 = b.one(target_ops.Selp("b32"), zero, mask0, big_a)
        mask1 = b.one(target_ops.Selp("b32"), zero, mask1, big_w)
        empty = op("and", "pred", empty, b.one(target_ops.Unary("not", "pred"), big_w))
    mask1 = b.one(target_ops.Selp("b32"), ones, mask1, empty)
    b.write(ops[0], op("and", "b32", mask0, b.one(target_ops.Unary("not", "b32"), mask1)))


@handler(*sorted(SIMD))
def _simd(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``vop4``/``vop2.dtype.atype.btype{.sat|.add} d, a, b, c`` (sec. 9.7.16.2): each
    byte (half) lane of ``a`` and ``b``, extended by its type, added, subtracted,
    averaged (a half away from zero), its absolute difference, minimum or maximum; then
    either merged into ``c`` as the lanes of ``d`` (truncated, or with ``.sat`` clamped
    to the lane range of ``dtype``), or with ``.add`` summed onto ``c``. nvcc writes
    ``vabsdiff4`` for ``__vabsdiffu4`` and ``__vsadu4``. Byte selectors and masks other
    than the defaults (all lanes, ``a``'s and ``b``'s own) are not modelled."""
    kinds, flags = mods[-3:], mods[:-3]
    if len(mods) < 3 or any(k not in ("u32", "s32") for k in kinds) or flags not in (
            [], ["sat"], ["add"]):
        raise b.syntax(f"{b.head} is {b.head}.dtype.atype.btype{{.sat|.add}} of .u32 and "
                       ".s32 types")
    count(b, ops, 4)
    if any("." in o for o in ops):
        raise b.unsupported("byte selectors and masks of a SIMD video instruction")
    if not all(b.is_register(o) for o in ops[1:]):
        raise b.syntax(f"{b.head} takes its sources in registers, not immediates")
    lanes = int(b.head[-1])
    width, kind = 32 // lanes, b.head[:-1]
    x, y = (b.bitcast(b.read(o, k), "b32") for o, k in zip(ops[1:3], kinds[1:]))
    c = b.read(ops[3], "s32" if kinds[0] == "s32" else "u32")
    c = c if kinds[0] == "s32" else b.bitcast(c, "s32")

    def op(name: str, *args: Value) -> Value:
        return b.one(target_ops.Binary(name, "s32"), *args)

    def lane(v: Value, t: str, k: int) -> Value:
        return b.bitcast(b.bit_field(t, b.bitcast(v, t), width * k, width), "s32")
    out = c
    signed = kinds[0] == "s32"
    low, high = (-(1 << width - 1), (1 << width - 1) - 1) if signed else (0, (1 << width) - 1)
    for k in range(lanes):
        u, v = lane(x, kinds[1], k), lane(y, kinds[2], k)
        if kind in ("vadd", "vavrg"):
            r = op("add", u, v)
            if kind == "vavrg":  # (a + b + 1) >> 1 for a sum at least 0, (a + b) >> 1 below
                up = b.one(target_ops.Setp("ge", "s32"), r, b.const(0, "s32"))
                r = op("add", r, b.one(target_ops.Selp("s32"), b.const(1, "s32"),
                                       b.const(0, "s32"), up))
                r = op("shr", r, b.const(1, "u32"))
        elif kind in ("vsub", "vabsdiff"):
            r = op("sub", u, v)
            if kind == "vabsdiff":
                r = b.one(target_ops.Unary("abs", "s32"), r)
        else:
            r = op("min" if kind == "vmin" else "max", u, v)
        if flags == ["add"]:
            out = op("add", out, r)
            continue
        if flags == ["sat"]:
            r = op("min", op("max", r, b.const(low, "s32")), b.const(high, "s32"))
        out = b.one(ptx_ops.Bfi("b32"), b.bitcast(r, "b32"), b.bitcast(out, "b32"),
                   b.const(width * k, "u32"), b.const(width, "u32"))
        out = b.bitcast(out, "s32")
    b.write(ops[0], b.bitcast(out, kinds[0]))


@handler("fns")
def _fns(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``fns.b32 d, mask, base, offset`` (sec. 9.7.1.20): the position of the
    ``offset``-th set bit of ``mask`` counting up from bit ``base`` (down for a negative
    ``offset``; ``offset`` 0: ``base`` itself if set), 0xFFFFFFFF when there is none.
    Found by rank and select: the bits at or above (at or below, reversed) ``base``,
    then five halvings of the range by population counts."""
    if mods != ["b32"]:
        raise b.syntax("fns is fns.b32")
    count(b, ops, 4)

    def op(name: str, t: str, *args: Value) -> Value:
        return b.one(target_ops.Binary(name, t), *args)

    def pick(t: str, yes: Value, no: Value, p: Value) -> Value:
        return b.one(target_ops.Selp(t), yes, no, p)

    def popc(v: Value) -> Value:
        return b.one(ptx_ops.BitCount("popc", "b32"), v)

    mask, base = b.read(ops[1], "b32"), b.read(ops[2], "u32")
    offset = b.read(ops[3], "s32")
    n = b.bitcast(b.one(target_ops.Unary("abs", "s32"), offset), "u32")
    ones = b.const(0xFFFFFFFF, "b32")
    up = op("and", "b32", mask, op("shl", "b32", ones, base))
    below = op("and", "b32", mask, op("shr", "b32", ones, op("sub", "u32", b.const(31, "u32"),
                                                              base)))
    positive = b.one(target_ops.Setp("gt", "s32"), offset, b.const(0, "s32"))
    m = pick("b32", up, b.one(ptx_ops.BitCount("brev", "b32"), below), positive)
    at, rank = b.const(0, "u32"), n
    for width in (16, 8, 4, 2, 1):  # the lower part of what is left holds too few: skip it
        part = popc(op("and", "b32", op("shr", "b32", m, at), b.const((1 << width) - 1, "b32")))
        skip = b.one(target_ops.Setp("lt", "u32"), part, rank)
        rank = pick("u32", op("sub", "u32", rank, part), rank, skip)
        at = pick("u32", op("add", "u32", at, b.const(width, "u32")), at, skip)
    at = pick("u32", at, op("sub", "u32", b.const(31, "u32"), at), positive)
    found = b.one(target_ops.Setp("le", "u32"), n, popc(m))
    d = pick("b32", b.bitcast(at, "b32"), ones, found)
    own = op("and", "b32", op("shr", "b32", mask, base), b.const(1, "b32"))
    own = pick("b32", b.bitcast(base, "b32"), ones,
               b.one(target_ops.Setp("ne", "b32"), own, b.const(0, "b32")))
    zero = b.one(target_ops.Setp("eq", "s32"), offset, b.const(0, "s32"))
    b.write(ops[0], pick("b32", own, d, zero))


#: the carry flag (CC.CF) that ``.cc`` instructions write and ``addc``/``subc``/``madc``
#: read, as a hidden predicate register; PTX cannot spell its name, so no program's
#: register collides with it
CARRY = "%cc.cf"
#: the plain forms of the opcodes that also have carry forms: arith's handlers
_PLAIN = {op: HANDLERS[op] for op in ("add", "sub", "mad")}


@handler("add", "sub", "mad", "addc", "subc", "madc")
def _carry_chain(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """Extended-precision integer arithmetic (sec. 9.7.2): ``add.cc``/``sub.cc``/
    ``mad{.lo,.hi}.cc`` write the carry (for subtraction the borrow) of their sum into
    the carry flag; ``addc``/``subc``/``madc{.lo,.hi}`` add it in (subtract it), and
    with ``.cc`` write their own. ``d = a + b + CF``, ``d = a - (b + CF)``,
    ``d = lo|hi(a * b) + c + CF``, each modulo 2^width. A read of the flag before any
    ``.cc`` instruction of the function is refused: the flag is undefined then."""
    carried = b.head in ("addc", "subc", "madc")
    if not carried and "cc" not in mods:
        _PLAIN[b.head](b, mods, ops)
        return
    t = ptx_type(b, mods)
    flags = sorted(mods[:-1])
    half = [f for f in flags if f in ("lo", "hi")]
    mad = b.head.startswith("mad")
    others = [f for f in flags if f not in ("lo", "hi")]
    if t not in ("u32", "s32", "u64", "s64") or len(half) != int(mad) or (
            others not in ([], ["cc"]) if carried else others != ["cc"]):
        form = f"{b.head}{'.{lo,hi}' if mad else ''}{'{.cc}' if carried else '.cc'}"
        raise b.syntax(f"{form} takes .u32, .s32, .u64 or .s64 and no other modifier")
    count(b, ops, 4 if mad else 3)
    u = "u" + t[1:]
    x, y = b.read(ops[1], t), b.read(ops[2], t)

    def op(name: str, *args: Value, typ: str = u, mode: str = "") -> Value:
        return b.one(target_ops.Binary(name, typ, mode), *args)

    def below(p: Value, q: Value) -> Value:
        return b.one(target_ops.Setp("lt", u), p, q)
    if mad:  # the product's half in the signedness of the type, then unsigned sums
        x = op("mul", x, y, typ=t, mode=half[0])
        y = b.read(ops[3], t)
    x, y = (v if t == u else b.bitcast(v, u) for v in (x, y))
    if b.head.startswith("sub"):
        d, out = op("sub", x, y), below(x, y)
    else:
        d = op("add", x, y)
        out = below(d, x)
    if carried:
        if CARRY not in b.scope.registers:  # ptxas takes it; the value is undefined
            raise PtxUnsupportedError(f"{b.head} reads the carry flag, which no earlier "
                                      f".cc instruction of this function writes, in "
                                      f"'{b.pi.text}'", loc=b.loc)
        flag = Value(RegType("pred"))
        b.pi.reads.append((flag, (CARRY,)))
        one = b.one(target_ops.Selp(u), b.const(1, u), b.const(0, u), flag)
        if b.head == "subc":
            d, late = op("sub", d, one), below(d, one)
        else:
            d = op("add", d, one)
            late = below(d, one)
        out = op("or", out, late, typ="pred")
    if "cc" in flags:
        b.scope.registers.setdefault(CARRY, "pred")
        b.pi.writes.append((out, (CARRY,)))
    b.write(ops[0], d if t == u else b.bitcast(d, t))


__all__ = ["CARRY"]
