"""PTX rules of the core instructions of :mod:`tessera.ir.dialects.target.ops` (PTX ISA 8.x,
chapter 9): one format function per op class, registered in
:data:`tessera.backend.ptx.render.emit.RULES`.

Where PTX requires a modifier that the op leaves empty, the rule supplies the one that
matches the interpreter's meaning: ``mul.lo`` for integer products, ``.rn`` for float
division, square root, reciprocal and rounding conversions, ``.rzi`` for float to
integer conversion, ``.approx`` for ``ex2``/``lg2`` (the only forms PTX has).
"""

from __future__ import annotations

from tessera.backend.ptx.render.emit import (
    DYNAMIC_SHARED,
    PtxWriter,
    address,
    arith_type,
    immediate,
    mem_type,
    mov_type,
    rule,
)
from tessera.backend.ptx.render.regalloc import RenderError, braced, operand
from tessera.ir.core import Instr
from tessera.ir.dialects.target import RegType, Return
from tessera.ir.dialects.target.guarded import GuardedLoad, GuardedStore
from tessera.ir.dialects.target.ops import (
    Bar,
    Binary,
    Const,
    Cvt,
    Fma,
    Load,
    Pack,
    Reduce,
    Selp,
    Setp,
    SharedAlloc,
    Shfl,
    Special,
    Store,
    Unary,
    Unpack,
)


# ------------------------------------------------------------------------------ rules
@rule(Return)
def _ret(e: PtxWriter, instr: Instr) -> None:
    e.out("ret;")


@rule(Special)
def _sreg(e: PtxWriter, instr: Instr) -> None:
    e.out(f"mov.u32 {e.regs.one(instr.result)}, %{instr.op.reg};")


@rule(Const)
def _const(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    typ = op.type if RegType(op.type).kind in "usp" else mov_type(op.type)
    e.out(f"mov.{typ} {e.regs.one(instr.result)}, {immediate(op.value, op.type)};")


def _binary_type(op: Binary) -> str:
    t = RegType(op.type)
    if op.op in ("and", "or", "xor", "shl"):
        return "pred" if op.type == "pred" else f"b{t.bits}"
    if op.op == "shr":
        return op.type  # shr.s is arithmetic, shr.u / shr.b logical
    return arith_type(op.type)


@rule(Binary)
def _binary(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    kind = RegType(op.type).kind
    mode = op.mode
    if not mode and op.op == "mul" and kind != "f":
        mode = "lo"  # integer mul must say which half of the product it keeps
    if not mode and op.op == "div" and kind == "f":
        mode = "rn"  # a float div needs a rounding mode (IEEE round-to-nearest-even)
    if op.type == "bf16" and op.op in ("add", "sub", "mul"):
        e.sm90(instr)  # add/sub/mul.bf16: sm_90, PTX 7.8 (sm_80 has fma.rn.bf16 only)
        e.require((7, 8))
    a, b = (e.regs.one(v) for v in instr.operands)
    name = ".".join(p for p in (op.op, mode, _binary_type(op)) if p)
    e.out(f"{name} {e.regs.one(instr.result)}, {a}, {b};")


_UNARY_MODE = {"sqrt": "rn", "rcp": "rn", "ex2": "approx", "lg2": "approx"}


@rule(Unary)
def _unary(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    if op.op == "mov":
        typ = mov_type(op.type)
    elif op.op == "not":
        typ = "pred" if op.type == "pred" else f"b{RegType(op.type).bits}"
    elif op.op in ("neg", "abs") and RegType(op.type).kind in "bu":
        typ = "s" + op.type[1:]
    else:
        typ = op.type
    mode = op.mode or _UNARY_MODE.get(op.op, "")
    name = ".".join(p for p in (op.op, mode, typ) if p)
    e.out(f"{name} {e.regs.one(instr.result)}, {e.regs.one(instr.operands[0])};")


@rule(Fma)
def _fma(e: PtxWriter, instr: Instr) -> None:
    a, b, c = (e.regs.one(v) for v in instr.operands)
    e.out(f"fma.rn.{instr.op.type} {e.regs.one(instr.result)}, {a}, {b}, {c};")


@rule(Setp)
def _setp(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    typ = op.type if op.cmp in ("eq", "ne") else arith_type(op.type)
    a, b = (e.regs.one(v) for v in instr.operands)
    e.out(f"setp.{op.cmp}.{typ} {e.regs.one(instr.result)}, {a}, {b};")


@rule(Selp)
def _selp(e: PtxWriter, instr: Instr) -> None:
    a, b, p = (e.regs.one(v) for v in instr.operands)
    d = e.regs.one(instr.result)
    if instr.op.type == "pred":  # selp has no .pred form: two predicated moves
        e.out(f"@{p} mov.pred {d}, {a};")
        e.out(f"@!{p} mov.pred {d}, {b};")
        return
    e.out(f"selp.{mov_type(instr.op.type)} {d}, {a}, {b}, {p};")


@rule(Cvt)
def _cvt(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    to, frm = RegType(op.to), RegType(op.frm)
    rnd = op.rnd
    to_bits = 16 if op.to.endswith("x2") else to.bits  # a packed pair narrows each half
    if not rnd and to.kind == "f" and (frm.kind != "f" or to_bits < frm.bits):
        rnd = "rn"  # int -> float and narrowing float conversions must round
    elif not rnd and to.kind != "f" and frm.kind == "f":
        rnd = "rzi"  # float -> int must round; truncation is C's conversion
    if op.sat == "satfinite":
        e.require((8, 1))
    if "bf16" in (op.to, op.frm):  # (scalar bf16; the packed bf16x2 forms are sm_80's)
        other = op.frm if op.to == "bf16" else op.to
        if other == "f32":
            e.require((7, 1))  # cvt.f32.bf16: PTX ISA 7.1 (ptxas says so)
        elif other != "bf16":
            e.sm90(instr)  # bf16 to or from f16, f64 or an integer: sm_90, PTX 7.8
            e.require((7, 8))
    name = ".".join(p for p in ("cvt", rnd, op.sat, op.to, op.frm) if p)
    srcs = ", ".join(e.regs.one(v) for v in instr.operands)
    e.out(f"{name} {e.regs.one(instr.result)}, {srcs};")


def _flat(e: PtxWriter, instr: Instr) -> list[str]:
    return [r for v in instr.operands for r in e.regs.of(v)]


@rule(Pack)
def _pack(e: PtxWriter, instr: Instr) -> None:
    t = instr.result.type
    srcs = _flat(e, instr)
    if isinstance(t, RegType) and t.count > 1:  # a register vector: one copy per register
        e.move(e.regs.of(instr.result), srcs, t.elem)
        return
    d = e.regs.one(instr.result)
    e.out(f"mov.b{RegType(instr.op.type).bits} {d}, {operand(srcs)};")


@rule(Unpack)
def _unpack(e: PtxWriter, instr: Instr) -> None:
    src = instr.operands[0].type
    dsts = [e.regs.one(r) for r in instr.results]
    if isinstance(src, RegType) and src.count > 1:
        e.move(dsts, e.regs.of(instr.operands[0]), src.elem)
        return
    e.out(f"mov.b{src.bits} {braced(dsts)}, {e.regs.one(instr.operands[0])};")


def _vec_suffix(vec: int) -> str:
    return f".v{vec}" if vec > 1 else ""


@rule(Load)
def _load(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    dst = operand(e.regs.of(instr.result))
    e.out(f"ld.{op.space}{_vec_suffix(op.vec)}.{mem_type(op.type)} {dst}, "
          f"{address(e, instr, op.offset)};")


@rule(Store)
def _store(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    src = operand(e.regs.of(instr.operands[1]))
    e.out(f"st.{op.space}{_vec_suffix(op.vec)}.{mem_type(op.type)} "
          f"{address(e, instr, op.offset)}, {src};")


@rule(GuardedLoad)
def _guarded_load(e: PtxWriter, instr: Instr) -> None:
    # the load first: it reads the address before the mov may overwrite a register
    # the allocator shares between a dying operand and the result
    op = instr.op
    dst = e.regs.of(instr.result)
    guard = e.regs.one(instr.operands[1])
    e.out(f"@{guard} ld.{op.space}{_vec_suffix(op.vec)}.{mem_type(op.type)} "
          f"{operand(dst)}, {address(e, instr, op.offset)};")
    for d, s in zip(dst, e.regs.of(instr.operands[2])):
        if d != s:
            e.out(f"@!{guard} mov.{mov_type(op.type)} {d}, {s};")


@rule(GuardedStore)
def _guarded_store(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    src = operand(e.regs.of(instr.operands[1]))
    e.out(f"@{e.regs.one(instr.operands[2])} st.{op.space}{_vec_suffix(op.vec)}."
          f"{mem_type(op.type)} {address(e, instr, op.offset)}, {src};")


@rule(Reduce)
def _reduce(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    typ = f"b{RegType(op.type).bits}" if op.op in ("and", "or", "xor") else arith_type(op.type)
    e.out(f"red.{op.space}.{op.op}.{typ} {address(e, instr)}, "
          f"{e.regs.one(instr.operands[1])};")


@rule(SharedAlloc)
def _shared(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    known = e.shared.setdefault(op.sym, (op.size, op.align))
    if known != (op.size, op.align):
        raise RenderError(f"shared buffer {op.sym} is declared twice with different sizes",
                          hint="give each shared buffer its own symbol", loc=instr.loc)
    if e.dynamic_offsets is not None:  # an offset into the one dynamic array
        offset = e.dynamic_offsets[op.sym]
        where = f"{DYNAMIC_SHARED}+{offset}" if offset else DYNAMIC_SHARED
        e.out(f"mov.u32 {e.regs.one(instr.result)}, {where};")
        return
    e.out(f"mov.u32 {e.regs.one(instr.result)}, {op.sym};")


@rule(Shfl)
def _shfl(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    a, b = (e.regs.one(v) for v in instr.operands)
    e.out(f"shfl.sync.{op.mode}.b32 {e.regs.one(instr.result)}, {a}, {b}, {op.clamp}, "
          f"0x{op.mask:08X};")


@rule(Bar)
def _bar(e: PtxWriter, instr: Instr) -> None:
    count = f", {instr.op.count}" if instr.op.count else ""
    e.out(f"bar.sync {instr.op.id}{count};")


__all__: list[str] = []
