"""Lowering rules for ids, constants and elementwise arithmetic.

Elementwise ops act register by register, so one rule serves scalars and distributed
tensors alike. Arithmetic matches the tile interpreter bit for bit: f32 ops carry an
explicit ``.rn`` (IEEE, never contracted into ``fma``); formats narrower than f32
compute in f32 and round back with ``cvt.rn`` (the registers hold f32 values of the
format); f64 ``+ - * /`` are IEEE binary64 with ``.rn``, f64 ``exp`` is the specified
binary64 exp (:mod:`tessera.lower.arith.mathlib64`), ``erf``, ``erfc``, ``tanh`` and ``log``
of every float format the specified binary64 ones (:mod:`tessera.lower.arith.mathlib_steps`) rounded
once, and
casts between f32 and f64 are
``cvt.f64.f32`` (exact) and ``cvt.rn.f32.f64`` (to bf16 or f16: rounded to odd on the
f32 grid, then to nearest even, one correct rounding); indices are 32-bit with Python's
floor division and modulo.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tessera.errors import UnsupportedError
from tessera.interp.target.wide import may_be_wide
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.tile import Constant
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import ids as tile_ids
from tessera.ir.types import TensorType
from tessera.lower.core import Lowerer, rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.values import NARROW, Dist, Lowered, Scalar, reg_type, storage_name

FLOAT_OPS = {tile_compute.Add: "add", tile_compute.Sub: "sub", tile_compute.Mul: "mul",
             tile_compute.Div: "div"}
CMP = {tile_compute.Lt: "lt", tile_compute.Le: "le", tile_compute.Gt: "gt", tile_compute.Ge: "ge",
       tile_compute.Eq: "eq", tile_compute.Ne: "ne"}


def result_type(instr: Instr) -> TensorType:
    t = instr.results[0].type
    assert isinstance(t, TensorType)
    return t


def regs_of(lv: Lowered) -> list[Value]:
    return [lv.reg] if isinstance(lv, Scalar) else list(lv.regs)  # type: ignore[union-attr]


def like(lv: Lowered, regs: list[Value], type: str) -> Lowered:
    if isinstance(lv, Scalar):
        return Scalar(regs[0], type)
    assert isinstance(lv, Dist)
    return Dist(lv.layout, regs, type)


def round_to(e: TargetEmitter, x: Value, element: object) -> Value:
    """Round an f32 register to a narrower float format (a no-op for f32)."""
    name = storage_name(element)  # type: ignore[arg-type]
    if name not in NARROW:
        return x
    fmt = NARROW[name]
    if fmt in ("e4m3", "e5m2"):  # no fp8 cvt before sm_89: integer arithmetic
        from tessera.lower.arith import fp8

        return fp8.round_value(e, x, name)
    narrow = e.cvt(x, fmt, "f32", "rn")
    if fmt == "bf16":  # a bf16 is the high half of the equal f32 (cvt.f32.bf16 needs sm_90)
        return e.pack([e.const(0, "b16"), narrow], "f32")
    return e.cvt(narrow, "f32", fmt)


def rounded_from(v: Value, fmt: str) -> Value | None:
    """The f32 register that :func:`round_to` rounded to ``fmt`` ("bf16") to make ``v``
    (``cvt.rn.bf16.f32`` then a pack into the high half), or None: a consumer that packs
    such values in pairs converts the sources with one ``cvt.rn.bf16x2.f32``, the same
    bits (PTX ISA sec. 9.7.9.21)."""
    from tessera.ir.dialects.target.ops import Const, Cvt, Pack

    pack = v.owner
    if fmt != "bf16" or not isinstance(pack, Instr) or not isinstance(pack.op, Pack) or \
            len(pack.operands) != 2:
        return None
    zero, narrow = (x.owner for x in pack.operands)
    if not (isinstance(zero, Instr) and isinstance(zero.op, Const) and zero.op.value == 0
            and isinstance(narrow, Instr) and narrow.op == Cvt("bf16", "f32", "rn")):
        return None
    return narrow.operands[0]


def elementwise(low: Lowerer, instr: Instr, args: list[Lowered],
                fn: Callable[[TargetEmitter, list[Value]], Value], type: str,
                order: Sequence[int] | None = None) -> list[Lowered]:
    """Apply ``fn`` to the operands' registers pairwise, the operands taken in ``order``
    (their indices; all of them in turn by default)."""
    from tessera.lower.rules.tensor import materialize

    e = low.em
    picks = range(len(args)) if order is None else order
    args = [materialize(low, args[k], low.layouts.get(instr.operands[k])) for k in picks]
    cols = [regs_of(a) for a in args]
    out = [fn(e, list(regs)) for regs in zip(*cols)]
    return [like(args[0], out, type)]


def in_registers(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """The operands read into registers: an operand may still be a memory view
    (``x[0:32] > 0.0`` compares memory directly), whose register type a rule needs."""
    from tessera.lower.rules.tensor import materialize

    return [materialize(low, a, low.layouts.get(v)) for a, v in zip(args, instr.operands)]


@rule(Constant)
def _constant(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, Constant)
    t = reg_type(op.element)
    value = op.value if t != "pred" else int(bool(op.value))
    if t in ("f32", "f64"):
        value = constant_value(float(value), op.element)
    return [Scalar(low.em.const(value, t), t)]


def constant_value(value: float, element: object) -> float:
    """A float constant of ``element``: an fp8 one rounded to its format (at compile
    time, as the interpreters round it); others as given."""
    from tessera.lower.arith import fp8

    name = storage_name(element)  # type: ignore[arg-type]
    return fp8.constant(value, element) if name in fp8.FORMATS else value  # type: ignore[arg-type]


@rule(tile_ids.LinearId, tile_ids.GroupId, tile_ids.LocalId, tile_ids.GridCoord)
def _ids(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    e, g = low.em, low.geom
    assert g is not None
    op = instr.op
    group = low.group_id(e)
    if isinstance(op, tile_ids.GroupId):
        return [Scalar(group, "s32")]
    if isinstance(op, tile_ids.LocalId):
        return [Scalar(low.local_id(e), "s32")]
    if isinstance(op, tile_ids.LinearId):
        if g.group_size == 1:
            return [Scalar(group, "s32")]
        v = e.add(e.mul(group, e.const(g.group_size, "s32"), "s32"), low.local_id(e), "s32")
        return [Scalar(v, "s32")]
    assert isinstance(op, tile_ids.GridCoord)
    inner = 1
    for d in g.grid[op.axis + 1:]:
        inner *= d
    v = group if inner == 1 else e.bin("div", group, e.const(inner, "s32"), "s32")
    if op.axis > 0:
        v = e.bin("rem", v, e.const(g.grid[op.axis], "s32"), "s32")
    return [Scalar(v, "s32")]


def _int_op(e: TargetEmitter, cls: type, a: Value, b: Value) -> Value:
    if cls in (tile_compute.Add, tile_compute.Sub, tile_compute.Mul):
        return e.bin(FLOAT_OPS[cls], a, b, "s32")
    if cls in (tile_compute.Maximum, tile_compute.Minimum):
        return e.bin("max" if cls is tile_compute.Maximum else "min", a, b, "s32")
    if cls in (tile_compute.FloorDiv, tile_compute.Mod):
        # Python semantics: the quotient rounds toward -inf, the remainder takes b's sign
        q = e.bin("div", a, b, "s32")
        r = e.bin("rem", a, b, "s32")
        zero = e.const(0, "s32")
        signs = e.bin("xor", e.setp("lt", r, zero, "s32"), e.setp("lt", b, zero, "s32"), "pred")
        fix = e.bin("and", e.setp("ne", r, zero, "s32"), signs, "pred")
        if cls is tile_compute.FloorDiv:
            return e.selp(e.bin("sub", q, e.const(1, "s32"), "s32"), q, fix, "s32")
        return e.selp(e.add(r, b, "s32"), r, fix, "s32")
    raise UnsupportedError(f"{cls.__name__} of integers is not lowered", loc=e.loc)


@rule(tile_compute.Add, tile_compute.Sub, tile_compute.Mul, tile_compute.Div,
      tile_compute.FloorDiv, tile_compute.Mod, tile_compute.Maximum, tile_compute.Minimum,
      tile_compute.Pow)
def _binary(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    cls = type(instr.op)
    t = result_type(instr)
    rt = reg_type(t.element, f"{instr.op.name}: ")
    if rt == "s32":
        return elementwise(low, instr, args, lambda e, r: _int_op(e, cls, *r), "s32")
    if rt == "f64" and cls in FLOAT_OPS and low.mode != "fast":  # IEEE binary64, .rn
        return elementwise(low, instr, args,
                           lambda e, r: e.bin(FLOAT_OPS[cls], r[0], r[1], "f64"), "f64")
    if rt == "f64" and cls in (tile_compute.Maximum, tile_compute.Minimum) \
            and low.mode != "fast":  # a selection: NaN propagates, as np.maximum does
        from tessera.lower.arith.mathlib64 import emit_max_nan_f64, emit_min_nan_f64

        pick = emit_max_nan_f64 if cls is tile_compute.Maximum else emit_min_nan_f64
        return elementwise(low, instr, args, lambda e, r: pick(e, r[0], r[1]), "f64")
    if rt != "f32" or cls in (tile_compute.FloorDiv, tile_compute.Mod, tile_compute.Pow):
        raise UnsupportedError(f"{instr.op.name} of {t.element} is not lowered to PTX",
                               loc=instr.loc)
    if cls in (tile_compute.Maximum, tile_compute.Minimum):  # NaN propagates, as np.maximum does
        name = "max" if cls is tile_compute.Maximum else "min"
        return elementwise(low, instr, args, lambda e, r: round_to(
            e, e.bin(name, r[0], r[1], "f32", "NaN"), t.element), "f32")
    name = FLOAT_OPS[cls]
    mode = "full" if name == "div" and low.mode == "fast" else ""  # div.full.f32: fastmath
    return elementwise(low, instr, args,
                       lambda e, r: round_to(e, e.bin(name, r[0], r[1], "f32", mode),
                                             t.element), "f32")


@rule(*CMP)
def _compare(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    cmp = CMP[type(instr.op)]
    args = in_registers(low, instr, args)
    t = args[0].type  # type: ignore[union-attr]
    if t == "f32" and cmp == "ne":
        cmp = "neu"  # Python's != is true for NaN
    if t == "pred":  # PTX has no setp.pred: bools compare as 0 < 1 with logic ops
        return elementwise(low, instr, args, lambda e, r: _compare_bools(e, cmp, *r), "pred")
    return elementwise(low, instr, args, lambda e, r: e.setp(cmp, r[0], r[1], t), "pred")


def _compare_bools(e: TargetEmitter, cmp: str, a: Value, b: Value) -> Value:
    """``a <cmp> b`` of two predicates, False < True as NumPy orders bools."""
    if cmp in ("eq", "ne"):
        diff = e.bin("xor", a, b, "pred")
        return diff if cmp == "ne" else e.un("not", diff, "pred")
    if cmp in ("gt", "ge"):  # a > b is b < a
        a, b, cmp = b, a, "lt" if cmp == "gt" else "le"
    # a < b: not a and b; a <= b: not a or b
    return e.bin("and" if cmp == "lt" else "or", e.un("not", a, "pred"), b, "pred")


@rule(tile_compute.And, tile_compute.Or)
def _logical(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    name = "and" if isinstance(instr.op, tile_compute.And) else "or"
    return elementwise(low, instr, args, lambda e, r: e.bin(name, r[0], r[1], "pred"), "pred")


@rule(tile_compute.Neg, tile_compute.Not, tile_compute.Abs, tile_compute.Sqrt,
      tile_compute.Trunc, tile_compute.Exp)
def _unary(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    t = result_type(instr)
    rt = reg_type(t.element, f"{instr.op.name}: ")
    cls = type(instr.op)
    if cls is tile_compute.Not:
        return elementwise(low, instr, args, lambda e, r: e.un("not", r[0], "pred"), "pred")
    if rt == "s32" and cls in (tile_compute.Neg, tile_compute.Abs):
        name = "neg" if cls is tile_compute.Neg else "abs"
        return elementwise(low, instr, args, lambda e, r: e.un(name, r[0], "s32"), "s32")
    if rt == "f64" and cls in (tile_compute.Neg, tile_compute.Abs):  # sign bit only
        name = "neg" if cls is tile_compute.Neg else "abs"
        return elementwise(low, instr, args, lambda e, r: e.un(name, r[0], "f64"), "f64")
    if rt == "f64" and cls is tile_compute.Exp and low.mode != "fast":
        from tessera.lower.arith.mathlib64 import emit_exp_f64_specified

        return elementwise(low, instr, args,
                           lambda e, r: emit_exp_f64_specified(e, r[0]), "f64")
    if rt != "f32":
        raise UnsupportedError(f"{instr.op.name} of {t.element} is not lowered", loc=instr.loc)
    if cls is tile_compute.Exp:
        if low.mode == "fast":
            from tessera.lower.fastmath import emit_exp_fast as emit_exp
        else:
            from tessera.lower.arith.mathlib import emit_exp_f32 as emit_exp

        return elementwise(low, instr, args,
                           lambda e, r: round_to(e, emit_exp(e, r[0]), t.element), "f32")
    if cls is tile_compute.Trunc:
        return elementwise(low, instr, args, lambda e, r: e.cvt(r[0], "f32", "f32", "rzi"),
                           "f32")
    name, mode = {tile_compute.Neg: ("neg", ""), tile_compute.Abs: ("abs", ""),
                  tile_compute.Sqrt: ("sqrt", "rn")}[cls]
    return elementwise(low, instr, args,
                       lambda e, r: round_to(e, e.un(name, r[0], "f32", mode), t.element),
                       "f32")


@rule(tile_compute.Erf, tile_compute.Erfc, tile_compute.Tanh, tile_compute.Log)
def _specified(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    """The specified binary64 erf, erfc, tanh or log of the value widened exactly
    (:func:`widened`), rounded once to the element, as the tile simulator computes it."""
    from tessera.lower.arith.mathlib_steps import EMITTERS

    t = result_type(instr)
    rt = reg_type(t.element, f"{instr.op.name}: ")
    emit = EMITTERS[instr.op.name]
    if rt == "f64":
        return elementwise(low, instr, args, lambda e, r: emit(e, r[0]), "f64")
    if rt != "f32":
        raise UnsupportedError(f"{instr.op.name} of {t.element} is not lowered", loc=instr.loc)
    return elementwise(low, instr, args,
                       lambda e, r: from_f64(e, emit(e, widened(e, r[0])), t.element), "f32")


def f32_rounded(e: TargetEmitter, x: Value) -> Value:
    """``x`` (``f32``) rounded to f32 where it may hold a wide ``mma`` accumulator
    (``mul.rn`` by 1; ``mov`` would keep it wide): the rounding the tile interpreter
    applies to an accumulator that any op but an add, a move or a store uses."""
    return e.mul(x, e.const(1.0, "f32"), "f32") if may_be_wide(x) else x


def widened(e: TargetEmitter, x: Value) -> Value:
    """``x`` (``f32``) widened exactly to ``f64``, after :func:`f32_rounded`
    (``cvt.f64.f32`` would widen the exact sum a wide register holds)."""
    return e.cvt(f32_rounded(e, x), "f64", "f32")


def from_f64(e: TargetEmitter, x: Value, element: object) -> Value:
    """An f64 register rounded once to a float format held in f32 registers: ``cvt.rn``
    to f32, or to odd on the f32 grid then to nearest even for bf16 and f16."""
    if storage_name(element) in NARROW:  # type: ignore[arg-type]
        from tessera.lower.exact.longacc import to_format

        return to_format(e, x, element)
    return e.cvt(x, "f32", "f64", "rn")


@rule(tile_compute.Where)
def _where(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    args = in_registers(low, instr, args)
    t = args[1].type  # type: ignore[union-attr]
    # selp takes (a, b, cond): the operands in the order 1, 2, 0
    return elementwise(low, instr, args, lambda e, r: e.selp(r[0], r[1], r[2], t), t,
                       order=(1, 2, 0))


@rule(tile_compute.Cast)
def _cast(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_compute.Cast)
    args = in_registers(low, instr, args)
    src = args[0].type  # type: ignore[union-attr]
    dst = reg_type(op.to, "cast: ")

    frm = instr.operands[0].type.element  # type: ignore[attr-defined]
    to_int8 = storage_name(op.to) == "int8" and storage_name(frm) != "int8" and src != "pred"

    def one(e: TargetEmitter, r: list[Value]) -> Value:
        x = r[0]
        if to_int8:
            return _to_int8(e, x, src)
        if src == dst == "f32":  # mul.rn by 1 rounds a wide accumulator once (mov would
            # not); a value some instruction already rounded to f32 needs no such multiply,
            # nor one that cvt.rn rounds: a wide accumulator rounds once, to the cast's
            # format (bf16, f16), as the tile interpreter's cast and store round it
            if NARROW.get(storage_name(op.to)) not in ("bf16", "f16"):
                x = f32_rounded(e, x)
            return round_to(e, x, op.to)
        if src == "s32" and dst == "f32":
            return round_to(e, e.cvt(x, "f32", "s32", "rn"), op.to)
        if src == "f32" and dst == "f64":
            return e.cvt(x, "f64", "f32")  # exact widening
        if src == "f64" and dst == "f32":
            return from_f64(e, x, op.to)
        if src == "f32" and dst == "s32":  # as convert: half to even, NaN to 0, saturated
            return e.cvt(x, "s32", "f32", "rni")
        if src == "pred":
            return e.selp(e.const(1 if dst == "s32" else 1.0, dst),
                          e.const(0 if dst == "s32" else 0.0, dst), x, dst)
        if dst == "pred":
            return e.setp("neu" if src == "f32" else "ne", x, e.const(0.0 if src == "f32"
                                                                      else 0, src), src)
        if src == dst:
            return x
        raise UnsupportedError(f"cast from {src} to {op.to} is not lowered", loc=e.loc)
    return elementwise(low, instr, args, one, dst)


def _to_int8(e: TargetEmitter, x: Value, src: str) -> Value:
    """``x`` cast to int8 as the interpreters cast (NumPy's ``rint``, NaN to 0, then
    saturated to -128..127), in an ``s32`` register."""
    if src == "f32":
        x, src = e.cvt(x, "s32", "f32", "rni"), "s32"  # NaN gives 0, saturated to s32
    if src != "s32":
        raise UnsupportedError(f"cast from {src} to int8 is not lowered", loc=e.loc)
    return e.bin("max", e.bin("min", x, e.const(127, "s32"), "s32"), e.const(-128, "s32"),
                 "s32")


__all__ = ["FLOAT_OPS", "constant_value", "elementwise", "from_f64", "like", "regs_of",
           "result_type", "round_to", "rounded_from"]
