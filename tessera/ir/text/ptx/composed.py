"""PTX instructions the reader writes as a few Target IR instructions of their meaning
(PTX ISA 8.x, sections named in each handler): ``cnot``, ``sad``, ``mul24``, ``szext``,
``dp4a``, ``dp2a``, ``testp``, and the hints ``prefetch``, ``prefetchu`` and
``nanosleep``, which change no value. nvcc writes them for ``__sad``, ``__mul24``,
``__dp4a``, ``isinf``/``isfinite``, prefetches and back-off loops.
"""

from __future__ import annotations

import numpy as np

from tessera.ir.core import Op, Value
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target import ptx_ops
from tessera.ir.text.ptx.arith import count, handler, ptx_type
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.memory import plain_address

#: testp's classes (sec. 9.7.3.3) as the comparisons of |a| that decide them
_CLASSES = ("finite", "infinite", "number", "notanumber", "normal", "subnormal")


def _one(b: InstrBuilder, op: Op, *args: Value) -> Value:
    (v,) = b.emit(op, list(args))
    return v


def _bits(b: InstrBuilder, t: str, x: Value, start: int, width: int) -> Value:
    """Bits ``start .. start + width`` of ``x``, sign-extended when ``t`` is signed."""
    return _one(b, ptx_ops.Bfe(t), x, b.const(start, "u32"), b.const(width, "u32"))


@handler("cnot")
def _cnot(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cnot.type d, a`` (sec. 9.7.8.4): ``a == 0 ? 1 : 0``."""
    t = ptx_type(b, mods)
    count(b, ops, 2)
    zero = _one(b, target_ops.Setp("eq", t), b.read(ops[1], t), b.const(0, t))
    b.write(ops[0], _one(b, target_ops.Selp(t), b.const(1, t), b.const(0, t), zero))


@handler("sad")
def _sad(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``sad.type d, a, b, c`` (sec. 9.7.1.7): ``c + (a < b ? b - a : a - b)``, wrapping."""
    t = ptx_type(b, mods)
    count(b, ops, 4)
    x, y, c = (b.read(o, t) for o in ops[1:])
    less = _one(b, target_ops.Setp("lt", t), x, y)
    diff = _one(b, target_ops.Selp(t), _one(b, target_ops.Binary("sub", t), y, x),
                _one(b, target_ops.Binary("sub", t), x, y), less)
    b.write(ops[0], _one(b, target_ops.Binary("add", t), c, diff))


@handler("mul24")
def _mul24(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``mul24.{lo,hi}.type d, a, b`` (sec. 9.7.1.5): the 48-bit product of the low 24
    bits (sign-extended for ``s32``); ``lo`` keeps its bits 0-31, ``hi`` its bits 16-47."""
    t = ptx_type(b, mods)
    count(b, ops, 3)
    x, y = (_bits(b, t, b.read(o, t), 0, 24) for o in ops[1:])
    if mods[0] == "lo":
        b.write(ops[0], _one(b, target_ops.Binary("mul", t, "lo"), x, y))
        return
    wide = t[0] + "64"
    product = _one(b, target_ops.Binary("mul", t, "wide"), x, y)
    shifted = _one(b, target_ops.Binary("shr", wide), product, b.const(16, "u32"))
    b.write(ops[0], _one(b, target_ops.Cvt(t, wide, "", ""), shifted))


@handler("szext")
def _szext(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``szext.{clamp,wrap}.type d, a, b`` (sec. 9.7.8.12): the low ``b`` bits of ``a``
    extended by the type's signedness; ``b`` is clamped to 32 or taken modulo 32."""
    t = ptx_type(b, mods)
    count(b, ops, 3)
    if mods[0] not in ("clamp", "wrap"):
        raise b.syntax("szext is szext.clamp or szext.wrap")
    if mods[0] == "clamp":
        n = _one(b, target_ops.Binary("min", "u32"), b.read(ops[2], "u32"), b.const(32, "u32"))
    else:
        n = b.bitcast(_one(b, target_ops.Binary("and", "b32"), b.read(ops[2], "b32"),
                           b.const(31, "b32")), "u32")
    b.write(ops[0], _one(b, ptx_ops.Bfe(t), b.read(ops[1], t), b.const(0, "u32"), n))


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
        xa = _bits(b, kinds[0], x, 16 * k if half else 8 * k, 16 if half else 8)
        yb = _bits(b, kinds[1], y, 8 * (first + k), 8)
        same = [v if k == out else b.bitcast(v, out) for v, k in zip((xa, yb), kinds)]
        product = _one(b, target_ops.Binary("mul", out, "lo"), *same)
        total = _one(b, target_ops.Binary("add", out), total, product)
    b.write(ops[0], total)


@handler("testp")
def _testp(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``testp.op.type p, a`` (sec. 9.7.3.3): whether ``a`` is finite, infinite, a
    number, not a number, normal (finite, nonzero, not subnormal) or subnormal."""
    if len(mods) != 2 or mods[0] not in _CLASSES or mods[1] not in ("f32", "f64"):
        raise b.syntax(f"testp is testp.{{{','.join(_CLASSES)}}}.{{f32,f64}}")
    test, t = mods
    count(b, ops, 2)
    x = b.read(ops[1], t)
    if test in ("number", "notanumber"):
        b.write(ops[0], _one(b, target_ops.Setp("num" if test == "number" else "nan", t), x, x))
        return
    size = _one(b, target_ops.Unary("abs", t), x)

    dt = np.float32 if t == "f32" else np.float64

    def compare(cmp: str, value: float) -> Value:
        return _one(b, target_ops.Setp(cmp, t), size, b.const(dt(value), t))
    tiny = 2.0**-126 if t == "f32" else 2.0**-1022
    inf = np.inf
    result = {"finite": lambda: compare("lt", inf), "infinite": lambda: compare("eq", inf),
              "normal": lambda: _one(b, target_ops.Binary("and", "pred"),
                                     compare("ge", tiny), compare("lt", inf)),
              "subnormal": lambda: _one(b, target_ops.Binary("and", "pred"),
                                        compare("lt", tiny), compare("gt", 0.0))}[test]()
    b.write(ops[0], result)


@handler("prefetch", "prefetchu", "nanosleep")
def _hint(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``prefetch``/``prefetchu`` (sec. 9.7.9.15) and ``nanosleep`` (sec. 9.7.13.12):
    hints that change no value; their operands are read, and checked, all the same."""
    count(b, ops, 1)
    if b.head == "nanosleep":
        if mods != ["u32"]:
            raise b.syntax("nanosleep is nanosleep.u32 t")
        b.read(ops[0], "u32")
        return
    space = "shared" if "shared" in mods else ""
    plain_address(b, ops[0], "u32" if space else "u64")


__all__: list[str] = []
