"""PTX rules of the core instructions of :mod:`tessera.ir.dialects.target.ops` (PTX ISA 8.x,
chapter 9): one format function per op class, registered in
:data:`tessera.backend.ptx.render.emit.RULES`.

Where PTX requires a modifier that the op leaves empty, the rule supplies the one that
matches the interpreter's meaning: ``mul.lo`` for integer products, ``.rn`` for float
division, square root, reciprocal and rounding conversions, ``.rzi`` for float to
integer conversion, ``.approx`` for ``ex2``/``lg2`` (the only forms PTX has).
"""

from __future__ import annotations

import functools

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
from tessera.ir.dialects.target import (
    FP8X2,
    HALF_ATOMICS,
    REG_TYPES,
    RegType,
    Return,
    cvt_needs,
)
from tessera.ir.dialects.target.guarded import GuardedLoad, GuardedStore
from tessera.ir.dialects.target.ops import (
    WIDE_CLOCKS,
    Bar,
    BarArrive,
    BarRed,
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
    typ = ("pred" if instr.op.reg == "is_explicit_cluster" else
           "u64" if instr.op.reg in WIDE_CLOCKS else "u32")
    e.out(f"mov.{typ} {e.regs.one(instr.result)}, %{instr.op.reg};")


@rule(Const)
def _const(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    typ = op.type if REG_TYPES[op.type][1] in "usp" else mov_type(op.type)
    e.out(f"mov.{typ} {e.regs.one(instr.results[0])}, {immediate(op.value, op.type)};")


def _binary_type(op: Binary) -> str:
    t = RegType(op.type)
    if op.op in ("and", "or", "xor", "shl"):
        return "pred" if op.type == "pred" else f"b{t.bits}"
    if op.op == "shr":
        return op.type  # shr.s is arithmetic, shr.u / shr.b logical
    return arith_type(op.type)


@functools.lru_cache(maxsize=1024)
def _binary_name(op: Binary) -> str:
    kind = RegType(op.type).kind
    mode = op.mode
    if not mode and op.op == "mul" and kind != "f":
        mode = "lo"  # integer mul must say which half of the product it keeps
    if not mode and op.op == "div" and kind == "f":
        mode = "rn"  # a float div needs a rounding mode (IEEE round-to-nearest-even)
    return ".".join(p for p in (op.op, mode, "ftz" if op.ftz else "", _binary_type(op)) if p)


@rule(Binary)
def _binary(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    if op.type == "bf16" and op.op in ("add", "sub", "mul"):
        e.sm90(instr)  # add/sub/mul.bf16: sm_90, PTX 7.8 (sm_80 has fma.rn.bf16 only)
        e.require((7, 8))
    one = e.regs.one
    a, b = (one(v) for v in instr.operands)
    e.out(f"{_binary_name(op)} {one(instr.results[0])}, {a}, {b};")


_UNARY_MODE = {"sqrt": "rn", "rcp": "rn", **dict.fromkeys(
    ("ex2", "lg2", "rsqrt", "tanh", "sin", "cos"), "approx")}


@rule(Unary)
def _unary(e: PtxWriter, instr: Instr) -> None:
    # a vector register (an accumulator copied whole) takes one instruction per element
    name = _unary_name(instr.op)
    for d, a in zip(e.regs.of(instr.results[0]), e.regs.of(instr.operands[0]), strict=True):
        e.out(f"{name} {d}, {a};")


@functools.lru_cache(maxsize=1024)
def _unary_name(op: Unary) -> str:
    if op.op == "mov":
        typ = mov_type(op.type)
    elif op.op == "not":
        typ = "pred" if op.type == "pred" else f"b{RegType(op.type).bits}"
    elif op.op in ("neg", "abs") and RegType(op.type).kind in "bu":
        typ = "s" + op.type[1:]
    else:
        typ = op.type
    mode = op.mode or _UNARY_MODE.get(op.op, "")
    if op.op == "ex2" and typ.startswith("bf16") and "ftz" not in mode:
        mode += ".ftz"  # PTX ISA, "ex2": the bf16 forms exist with .ftz only
    return ".".join(p for p in (op.op, mode, "ftz" if op.ftz else "", typ) if p)


@rule(Fma)
def _fma(e: PtxWriter, instr: Instr) -> None:
    a, b, c = (e.regs.one(v) for v in instr.operands)
    ftz = ".ftz" if instr.op.ftz else ""
    e.out(f"fma.{instr.op.rnd}{ftz}.{instr.op.type} {e.regs.one(instr.result)}, {a}, {b}, "
          f"{c};")


@functools.lru_cache(maxsize=1024)
def _setp_name(op: Setp) -> str:
    typ = op.type if op.cmp in ("eq", "ne") else arith_type(op.type)
    return f"setp.{op.cmp}{'.ftz' if op.ftz else ''}.{typ}"


@rule(Setp)
def _setp(e: PtxWriter, instr: Instr) -> None:
    one = e.regs.one
    a, b = (one(v) for v in instr.operands)
    e.out(f"{_setp_name(instr.op)} {one(instr.results[0])}, {a}, {b};")


@rule(Selp)
def _selp(e: PtxWriter, instr: Instr) -> None:
    a, b, p = (e.regs.one(v) for v in instr.operands)
    d = e.regs.one(instr.results[0])
    if instr.op.type == "pred":  # selp has no .pred form: two predicated moves
        e.out(f"@{p} mov.pred {d}, {a};")
        e.out(f"@!{p} mov.pred {d}, {b};")
        return
    e.out(f"selp.{mov_type(instr.op.type)} {d}, {a}, {b}, {p};")


@rule(Cvt)
def _cvt(e: PtxWriter, instr: Instr) -> None:
    name, version, arch = _cvt_name(instr.op, int(e.target[3:5]))
    e.at_least(instr, arch)
    if version:
        e.require(version)
    srcs = ", ".join(e.regs.one(v) for v in instr.operands)
    e.out(f"{name} {e.regs.one(instr.results[0])}, {srcs};")


@functools.lru_cache(maxsize=1024)
def _cvt_name(op: Cvt, arch: int) -> tuple[str, tuple[int, int] | None, int]:
    """The mnemonic of ``op`` on ``sm_<arch>``, the PTX version it needs (None: any),
    and the target (80, 89 or 90) it needs."""
    version, sm = cvt_needs(op.to, op.frm, op.sat == "satfinite", arch)
    rnd = op.rnd
    if not rnd and op.to not in FP8X2 and op.frm not in FP8X2:  # (fp8 pairs say .rn)
        to, frm = RegType(op.to), RegType(op.frm)
        to_bits = 16 if op.to.endswith("x2") else to.bits  # a packed pair narrows each half
        if to.kind == "f" and (frm.kind != "f" or to_bits < frm.bits):
            rnd = "rn"  # int -> float and narrowing float conversions must round
        elif to.kind != "f" and frm.kind == "f":
            rnd = "rzi"  # float -> int must round; truncation is C's conversion
    name = ".".join(p for p in ("cvt", rnd, op.sat, op.to, op.frm) if p)
    return name, version if version > (7, 0) else None, sm


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


@functools.lru_cache(maxsize=1024)
def _access(op: Load | Store) -> str:
    """``.space.type`` of ``ld``/``st`` (with ``.vN``)."""
    return f".{op.space}{_vec_suffix(op.vec)}.{mem_type(op.type)}"


@rule(Load)
def _load(e: PtxWriter, instr: Instr) -> None:
    dst = operand(e.regs.of(instr.results[0]))
    e.out(f"{e.ordered(instr, 'ld')}{_access(instr.op)} {dst}, "
          f"{address(e, instr, instr.op.offset)};")


@rule(Store)
def _store(e: PtxWriter, instr: Instr) -> None:
    src = operand(e.regs.of(instr.operands[1]))
    e.out(f"{e.ordered(instr, 'st')}{_access(instr.op)} "
          f"{address(e, instr, instr.op.offset)}, {src};")


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
    if op.type in HALF_ATOMICS:
        typ = f"noftz.{typ}"
    e.out(f"{e.ordered(instr, 'red')}.{op.space}.{op.op}.{typ} {address(e, instr)}, "
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


@rule(BarRed)
def _bar_red(e: PtxWriter, instr: Instr) -> None:
    op = instr.op
    typ = "u32" if op.op == "popc" else "pred"
    e.out(f"bar.red.{op.op}.{typ} {e.regs.one(instr.result)}, {op.id}, "
          f"{e.regs.one(instr.operands[0])};")


@rule(BarArrive)
def _bar_arrive(e: PtxWriter, instr: Instr) -> None:
    e.out(f"bar.arrive {instr.op.id}, {instr.op.count};")


__all__: list[str] = []
