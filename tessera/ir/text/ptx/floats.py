"""PTX float instructions the reader writes as a few Target IR instructions of their
meaning (PTX ISA 8.x, sections named in each handler): ``testp``, ``set`` (of packed
halves too), ``fma.relu``/``fma.sat`` of halves and ``cvt.relu`` to halves. nvcc writes
them for ``isinf``/``isfinite``, ``hexp``, ``h2exp``, ``__hlt2`` and ``__hfma2_relu``.
"""

from __future__ import annotations

import numpy as np

from tessera.ir.core import Value
from tessera.ir.dialects.target import REG_TYPES, ptx_ops
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.text.ptx.arith import HANDLERS, UNSIGNED_CMP, count, handler, ptx_type
from tessera.ir.text.ptx.context import InstrBuilder
from tessera.ir.text.ptx.lexer import PtxSyntaxError

#: testp's classes (sec. 9.7.3.3) as the comparisons of |a| that decide them
_CLASSES = ("finite", "infinite", "number", "notanumber", "normal", "subnormal")




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
        b.write(ops[0], b.one(target_ops.Setp("num" if test == "number" else "nan", t), x, x))
        return
    size = b.one(target_ops.Unary("abs", t), x)

    dt = np.float32 if t == "f32" else np.float64

    def compare(cmp: str, value: float) -> Value:
        return b.one(target_ops.Setp(cmp, t), size, b.const(dt(value), t))
    tiny = 2.0**-126 if t == "f32" else 2.0**-1022
    inf = np.inf
    result = {"finite": lambda: compare("lt", inf), "infinite": lambda: compare("eq", inf),
              "normal": lambda: b.one(target_ops.Binary("and", "pred"),
                                     compare("ge", tiny), compare("lt", inf)),
              "subnormal": lambda: b.one(target_ops.Binary("and", "pred"),
                                        compare("lt", tiny), compare("gt", 0.0))}[test]()
    b.write(ops[0], result)


#: set's destination types, and the integer sources whose comparisons are unsigned
_SET_TO = ("u32", "s32", "f32", "u16", "s16", "f16", "bf16")
_SET_FROM = ("b16", "b32", "b64", "u16", "u32", "u64", "s16", "s32", "s64", "f16", "bf16",
             "f32", "f64")


@handler("set")
def _set(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``set.CmpOp{.BoolOp}{.ftz}.dtype.stype d, a, b{, {!}c}`` (sec. 9.7.3.5): the
    comparison, combined with ``c`` by ``.and``/``.or``/``.xor``, as 1.0 or 0.0 for a
    float ``dtype`` and all ones or 0 for an integer one (``cuda_fp16.h``'s ``hexp``
    corrects its result with ``set.eq.f16.f16``); packed halves compare half by half."""
    if len(mods) >= 3 and mods[-1] in ("f16x2", "bf16x2"):
        _set_pairs(b, mods, ops)
        return
    if len(mods) < 3 or mods[-2] not in _SET_TO or mods[-1] not in _SET_FROM:
        raise b.syntax(f"set is set.CmpOp{{.BoolOp}}{{.ftz}}.dtype.stype with dtype one of "
                       f"{', '.join('.' + t for t in _SET_TO)}")
    to, frm = mods[-2:]
    cmp, rest = mods[0], mods[1:-2]
    combine = [f for f in rest if f in ("and", "or", "xor")]
    ftz = "ftz" in rest
    if len(combine) + ftz != len(rest) or len(combine) > 1:
        raise b.syntax("set takes one of .and, .or, .xor and .ftz after its comparison")
    if "bf16" in (to, frm):
        b.require("set of .bf16", 90, (7, 8))
    count(b, ops, 4 if combine else 3)
    if REG_TYPES[frm][1] in "ub":
        cmp = UNSIGNED_CMP.get(cmp, cmp)
    try:
        p = b.one(target_ops.Setp(cmp, frm, ftz), b.read(ops[1], frm), b.read(ops[2], frm))
    except PtxSyntaxError as err:  # an unknown comparison: set's own wording
        raise b.syntax(f"set compares with a setp comparison, not .{cmp}") from err
    if combine:
        p = b.one(target_ops.Binary(combine[0], "pred"), p, b.read(ops[3], "pred"))
    bits, kind = REG_TYPES[to]
    yes = {"f": 1.0, "s": -1}.get(kind, (1 << bits) - 1)  # 1.0, or every bit set
    true, false = (b.const(v, to) for v in (yes, 0.0 if kind == "f" else 0))
    b.write(ops[0], b.one(target_ops.Selp(to), true, false, p))


#: 1.0 in each half of a pair, and in one half
_ONES = {"f16x2": 0x3C003C00, "bf16x2": 0x3F803F80, "f16": 0x3C00, "bf16": 0x3F80}


def _set_pairs(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``set.CmpOp{.ftz}.dtype.f16x2 d, a, b`` (and ``.bf16x2``): each half compared as
    one ``set`` of that half, 1.0 (``dtype`` the pair) or all ones (``.u32``) per half."""
    to, frm, half = mods[-2], mods[-1], mods[-1][:-2]
    if to not in (frm, "u32") or len(mods) > 4 or (len(mods) == 4 and mods[2] != "ftz"):
        raise b.syntax(f"set of .{frm} pairs is set.CmpOp{{.ftz}}.{frm}|u32.{frm}")
    if frm == "bf16x2":
        b.require("set of .bf16x2", 90, (7, 8))
    count(b, ops, 3)
    x, y = (b.bitcast(b.read(o, frm), "u32") for o in ops[1:3])
    cmp = mods[0]
    out = b.const(0, "b32")
    yes = b.const(_ONES[half] if to == frm else 0xFFFF, "b32")
    for k in range(2):
        u, v = (b.bitcast(b.one(target_ops.Cvt("u16", "u32"), b.bit_field("u32", w, 16 * k, 16)),
                          half) for w in (x, y))
        try:
            p = b.one(target_ops.Setp(cmp, half, len(mods) == 4), u, v)
        except PtxSyntaxError as err:
            raise b.syntax(f"set compares with a setp comparison, not .{cmp}") from err
        lane = b.one(target_ops.Selp("b32"), yes, b.const(0, "b32"), p)
        out = b.one(ptx_ops.Bfi("b32"), lane, out, b.const(16 * k, "u32"),
                   b.const(16, "u32"))
    b.write(ops[0], b.bitcast(out, to))


_FMA = HANDLERS["fma"]


@handler("fma")
def _fma_clamped(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``fma.rn{.ftz}.relu`` and ``fma.rn{.ftz}.sat`` of halves and pairs (sec. 9.7.4.4):
    the product and sum rounded once, then ``.relu`` takes ``max.NaN`` with zero (a
    negative to 0, a NaN to the canonical NaN) and ``.sat`` clamps to [0, 1] (a NaN to
    +0), as ``cvt.sat`` does. Other forms are arith's."""
    clamp = [f for f in mods if f in ("relu", "sat")]
    if not clamp:
        _FMA(b, mods, ops)
        return
    t = ptx_type(b, mods)
    rest = sorted(f for f in mods[:-1] if f not in clamp)
    if t not in _ONES or len(clamp) != 1 or rest not in (["rn"], ["ftz", "rn"]) or (
            "bf16" in t and "ftz" in rest):
        raise b.syntax(f"fma.{clamp[0]} is fma.rn{{.ftz}}.{clamp[0]} of .f16, .f16x2, "
                       ".bf16 or .bf16x2 (no .ftz for .bf16)")
    count(b, ops, 4)
    ftz = "ftz" in rest
    d = b.one(target_ops.Fma(t, ftz, "rn"), *(b.read(o, t) for o in ops[1:]))
    wide = "b32" if t.endswith("x2") else "b16"
    zero, one = (b.bitcast(b.const(v, wide), t) for v in (0, _ONES[t]))
    if clamp == ["relu"]:
        d = b.one(target_ops.Binary("max", t, "NaN"), d, zero)
    else:
        for op, bound in (("max", zero), ("min", one)):
            d = b.one(target_ops.Binary(op, t, ftz=ftz), d, bound)
    b.write(ops[0], d)


_CVT = HANDLERS["cvt"]


@handler("cvt")
def _cvt_relu(b: InstrBuilder, mods: list[str], ops: list[str]) -> None:
    """``cvt.rn.relu`` and ``cvt.rz.relu`` of f32 to ``.f16``, ``.bf16`` (one source) and
    their pairs (two sources, the first into the upper half) (sec. 9.7.9.21, sm_80): the
    conversion rounded once, then ``max.NaN`` with zero (a negative to 0, a NaN to the
    canonical NaN). Other forms are arith's; fp8 pairs' ``.relu`` is not modelled."""
    if "relu" not in mods or mods[-2] not in _ONES:
        _CVT(b, mods, ops)
        return
    to, rnd = mods[-2], [f for f in mods[:-2] if f != "relu"]
    if rnd not in (["rn"], ["rz"]) or len(mods) != 4 or mods[-1] != "f32":
        raise b.syntax(f"cvt.relu to .{to} is cvt.rn.relu.{to}.f32 (or .rz)")
    pair = to.endswith("x2")
    count(b, ops, 3 if pair else 2)
    d = b.one(target_ops.Cvt(to, "f32", rnd[0]), *(b.read(o, "f32") for o in ops[1:]))
    zero = b.bitcast(b.const(0, "b32" if pair else "b16"), to)
    b.write(ops[0], b.one(target_ops.Binary("max", to, "NaN"), d, zero))
