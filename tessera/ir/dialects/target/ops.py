"""Target IR instructions: one op per PTX instruction family.

Each op's attributes are the instruction's modifiers (``ftz`` on float arithmetic:
subnormal inputs and results flushed to sign-preserving zero); its operands and results
are registers. Semantics are those of the PTX ISA (PTX ISA 8.x, chapter 9 "Instruction
Set"), except where a docstring says otherwise. Two conventions fix what PTX leaves
open, so that the interpreter is deterministic and agrees with Tile IR bit for bit:

* ``mma`` and ``wgmma`` accumulate exactly: products in float64, the k-sum of one
  instruction in ascending k, added to the accumulator in float64; the accumulator
  registers hold that *wide* value until an instruction other than ``add``/``sub``/
  ``mov``/``selp``/another ``mma`` reads them, which rounds it to f32 (the Tile IR
  golden accumulation, see :mod:`tessera.interp.tile.numeric`). Hardware accumulates
  in f32; tests compare GPU results within the precision policy's tolerance.
* ``red.global.add`` from many CTAs applies in CTA order (linear CTA id).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tessera.arch.cluster import CLUSTER_REGS
from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import FP8X2, PRED, U32, RegType, reg_of
from tessera.ir.dialects.target.memory_ops import Effect as _Effect
from tessera.ir.dialects.target.memory_ops import Load, Reduce, SharedAlloc, Store

SPECIAL_REGS = ("tid.x", "tid.y", "ntid.x", "ctaid.x", "ctaid.y", "ctaid.z", "nctaid.x",
                "nctaid.y", "nctaid.z", "laneid", "warpid", "tid.z", "ntid.y", "ntid.z",
                "lanemask_eq", "lanemask_lt", "lanemask_le", "lanemask_gt", "lanemask_ge",
                "smid", "nsmid", "nwarpid")
#: the special registers that advance as a thread runs; the 64-bit ones are read as u64
CLOCKS = ("clock", "clock_hi", "clock64", "globaltimer", "globaltimer_lo", "globaltimer_hi")
WIDE_CLOCKS = ("clock64", "globaltimer")
#: the driver's environment registers (``%envreg1``/``2``: a cooperative launch's grid
#: workspace, which cooperative groups' ``grid.sync()`` reads)
ENVREGS = tuple(f"envreg{i}" for i in range(32))
BINARY = ("add", "sub", "mul", "div", "rem", "min", "max", "and", "or", "xor", "shl", "shr",
          "copysign")
UNARY = ("neg", "abs", "not", "sqrt", "rcp", "ex2", "lg2", "mov", "rsqrt", "tanh", "sin",
         "cos")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu",
           "num", "nan")


#: the directed roundings of float arithmetic: toward zero, -inf, +inf
DIRECTED = ("rz", "rm", "rp")


def _check_ftz(op: Any) -> None:
    """``.ftz`` (flush subnormal inputs and results to sign-preserving zero) exists for
    f32 and f16 arithmetic only (PTX ISA, sec. 9.7.3 and 9.7.4)."""
    if op.ftz and op.type not in ("f32", "f16", "f16x2"):
        raise IRVerifyError(f"{op.name}: .ftz applies to f32 and f16, not {op.type}")


def _same(op: Op, operands: Sequence[Type], n: int) -> RegType:
    check_count(op, operands, n)
    first = reg_of(op, operands[0])
    if any(t is not first and t != first for t in operands):
        raise IRVerifyError(f"{op.name} operands must have one type, got "
                            f"{', '.join(map(str, operands))}")
    return first


@register_op
@dataclass(frozen=True)
class Special(Op):
    """A special register (``%tid.x``, ``%ctaid.y``, ``%laneid``, ``%clock``...), read
    as ``u32``; ``%clock64`` and ``%globaltimer`` as ``u64``."""

    name: ClassVar[str] = "ptx.sreg"
    reg: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        if self.reg not in SPECIAL_REGS + CLUSTER_REGS + CLOCKS + ENVREGS:
            raise IRVerifyError(f"unknown special register %{self.reg}")
        return (PRED if self.reg == "is_explicit_cluster" else
                RegType("u64") if self.reg in WIDE_CLOCKS else U32,)


@register_op
@dataclass(frozen=True)
class Const(Op):
    """``mov.<type> %r, <value>``: an immediate (floats print as exact hex)."""

    name: ClassVar[str] = "ptx.const"
    value: Any
    type: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return (RegType(self.type),)


@register_op
@dataclass(frozen=True)
class Binary(Op):
    """``<op>{.mode}.<type> d, a, b``. ``mode`` is ``rn`` for float add/sub/mul/div
    (an explicit rounding mode also forbids fusing into ``fma``), ``lo``/``wide`` for
    integer ``mul``, ``approx`` for ``div.approx.f32``; ``shl``/``shr`` shift by a
    ``u32`` amount. ``mul.wide.u32`` returns ``u64``."""

    name: ClassVar[str] = "ptx.bin"
    op: str
    type: str
    mode: str = ""
    ftz: bool = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.op not in BINARY:
            raise IRVerifyError(f"unknown binary instruction {self.op!r}")
        _check_ftz(self)
        if self.mode in DIRECTED and (self.op not in ("add", "sub", "mul", "div")
                                      or self.type not in ("f32", "f64")):
            raise IRVerifyError(f"{self.op}.{self.mode}: directed rounding is modelled for "
                                "add, sub, mul and div of f32 and f64")
        check_count(self, operands, 2)
        a = reg_of(self, operands[0], self.type)
        if self.op in ("shl", "shr"):
            reg_of(self, operands[1], "u32")
        else:
            reg_of(self, operands[1], self.type)
        if self.mode == "wide":
            return (RegType({"u32": "u64", "s32": "s64", "u16": "u32", "s16": "s32"}[a.elem]),)
        return (a,)


@register_op
@dataclass(frozen=True)
class Unary(Op):
    """``<op>{.mode}.<type> d, a``: ``ex2.approx.f32``, ``rcp.rn.f32``, ``sqrt.rn.f32``,
    ``neg``, ``abs``, ``not``, ``mov`` (a register copy)."""

    name: ClassVar[str] = "ptx.un"
    op: str
    type: str
    mode: str = ""
    ftz: bool = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.op not in UNARY:
            raise IRVerifyError(f"unknown unary instruction {self.op!r}")
        _check_ftz(self)
        check_count(self, operands, 1)
        return (reg_of(self, operands[0], self.type),)


@register_op
@dataclass(frozen=True)
class Fma(Op):
    """``fma.<rnd>.<type> d, a, b, c``: ``a * b + c`` rounded once, to nearest even
    (``rn``) or, for f32 and f64, toward zero, -inf or +inf (``rz``, ``rm``, ``rp``)."""

    name: ClassVar[str] = "ptx.fma"
    type: str
    ftz: bool = False
    rnd: str = "rn"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        _check_ftz(self)
        if self.rnd != "rn" and (self.rnd not in DIRECTED or self.type not in ("f32", "f64")):
            raise IRVerifyError(f"fma.{self.rnd}.{self.type}: fma rounds .rn, or f32 and "
                                "f64 toward zero, -inf or +inf")
        return (_same(self, operands, 3),)


@register_op
@dataclass(frozen=True)
class Setp(Op):
    """``setp.<cmp>.<type> p, a, b`` (the ``u`` comparisons are true on NaN); PTX has
    no ``setp.pred``: predicates compare with ``xor``/``and``/``or``/``not``."""

    name: ClassVar[str] = "ptx.setp"
    cmp: str
    type: str
    ftz: bool = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.cmp not in COMPARE:
            raise IRVerifyError(f"unknown comparison {self.cmp!r}")
        _check_ftz(self)
        if self.type == "pred":
            raise IRVerifyError("setp does not compare predicates",
                                hint="use xor.pred (ne), not of it (eq), and/or with not")
        _same(self, operands, 2)
        reg_of(self, operands[0], self.type)
        return (PRED,)


@register_op
@dataclass(frozen=True)
class Selp(Op):
    """``selp.<type> d, a, b, p``: ``p ? a : b`` (``pred`` selects with ``and``/``or``)."""

    name: ClassVar[str] = "ptx.selp"
    type: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        t = _same(self, operands[:2], 2)
        reg_of(self, operands[2], "pred")
        return (t,)


@register_op
@dataclass(frozen=True)
class Cvt(Op):
    """``cvt{.rnd}{.sat}.<to>.<from> d, a``: ``rnd`` is ``rn`` (float results), ``rzi``/
    ``rni`` (float to integer); ``satfinite`` clamps narrow floats to their finite range;
    ``cvt.rn.bf16x2.f32 d, hi, lo`` packs two values (two operands). The fp8 pairs
    (:data:`FP8X2`, sm_89) live in a ``b16`` register: ``cvt.rn.satfinite.e4m3x2.f32 d,
    hi, lo`` and ``cvt.rn.satfinite.e4m3x2.f16x2 d, a`` narrow, ``cvt.rn.f16x2.e4m3x2 d,
    a`` widens."""

    name: ClassVar[str] = "ptx.cvt"
    to: str
    frm: str
    rnd: str = ""
    sat: str = ""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.to in FP8X2 or self.frm in FP8X2:
            return self._infer_fp8(operands)
        n = 2 if self.to.endswith("x2") else 1
        check_count(self, operands, n)
        for t in operands:
            reg_of(self, t, self.frm)
        return (RegType(self.to),)

    def _infer_fp8(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.to in FP8X2:
            if self.frm not in ("f32", "f16x2") or (self.rnd, self.sat) != ("rn", "satfinite"):
                raise IRVerifyError(f"ptx.cvt to {self.to} is cvt.rn.satfinite.{self.to} of "
                                    f"two f32 or one f16x2, not .{self.rnd}.{self.sat}."
                                    f"{self.to}.{self.frm}")
            check_count(self, operands, 2 if self.frm == "f32" else 1)
            for t in operands:
                reg_of(self, t, self.frm)
            return (RegType("b16"),)
        if self.to != "f16x2" or (self.rnd, self.sat) != ("rn", ""):
            raise IRVerifyError(f"ptx.cvt from {self.frm} is cvt.rn.f16x2.{self.frm}, not "
                                f".{self.rnd}.{self.sat}.{self.to}.{self.frm}")
        check_count(self, operands, 1)
        reg_of(self, operands[0], "b16")
        return (RegType("f16x2"),)


@register_op
@dataclass(frozen=True)
class Pack(Op):
    """``mov.b<N> d, {a, b, ...}``: concatenate registers, first operand in the low bits
    (``count`` > 1 builds a register vector instead: ``{%r0, %r1}``)."""

    name: ClassVar[str] = "ptx.pack"
    type: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if not operands:
            raise IRVerifyError("ptx.pack takes at least one operand")
        t = RegType(self.type)
        bits = sum(reg_of(self, o).bits * reg_of(self, o).count for o in operands)
        if bits == t.bits:
            return (t,)
        if all(o == operands[0] for o in operands) and reg_of(self, operands[0]).elem == self.type:
            return (RegType(self.type, len(operands)),)
        raise IRVerifyError(f"ptx.pack of {bits} bits cannot make reg<{self.type}>")


@register_op
@dataclass(frozen=True)
class Unpack(Op):
    """``mov.b<N> {a, b}, d`` or the registers of a vector: ``count`` results of
    ``type``, the first from the low bits (or the vector's first register)."""

    name: ClassVar[str] = "ptx.unpack"
    type: str
    count: int

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        src = reg_of(self, operands[0])
        part = RegType(self.type)
        if (src.count == self.count and src.elem == self.type) or \
                (src.count == 1 and part.bits * self.count == src.bits):
            return (part,) * self.count
        raise IRVerifyError(f"ptx.unpack cannot split {src} into {self.count} x reg<{self.type}>")


@register_op
@dataclass(frozen=True)
class Shfl(Op):
    """``shfl.sync.<mode>.b32 d, a, b, c, membermask`` with ``mode`` bfly/down/up/idx;
    operands: the value, the lane or offset (``u32``); ``clamp`` and the mask are
    attributes (all 32 lanes by default)."""

    name: ClassVar[str] = "ptx.shfl"
    mode: str
    clamp: int = 31
    mask: int = 0xFFFFFFFF

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 2)
        reg_of(self, operands[1], "u32")
        return (reg_of(self, operands[0], "b32", "u32", "s32", "f32"),)


@register_op
@dataclass(frozen=True)
class Bar(_Effect):
    """``bar.sync <id>``: every thread of the CTA arrives, none passes until all do.
    ``bar.sync <id>, <count>`` (``count`` > 0, a multiple of 32) is a *named* barrier
    of ``count`` threads, whole warps (PTX ISA sec. 9.7.13.1): the threads that arrive,
    e.g. the consumer warpgroups of a warp-specialised kernel, order their shared
    memory accesses without the rest of the CTA."""

    name: ClassVar[str] = "ptx.bar"
    id: int = 0
    count: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        if not 0 <= self.id < 16 or self.count < 0 or self.count % 32:
            raise IRVerifyError(f"bar.sync {self.id}, {self.count}: the id is 0..15 and "
                                "the thread count a multiple of 32")
        return ()


@register_op
@dataclass(frozen=True)
class BarRed(Op):
    """``bar.red.<op> d, <id>, p`` (sec. 9.7.13.1): ``bar.sync <id>`` that also reduces a
    predicate over the CTA's threads: ``popc`` counts those whose ``p`` is true (``u32``),
    ``and``/``or`` says whether all or any are (``pred``); CUDA's
    ``__syncthreads_count``/``_and``/``_or``."""

    name: ClassVar[str] = "ptx.bar_red"
    pure: ClassVar[bool] = False
    op: str
    id: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "pred")
        if self.op not in ("popc", "and", "or") or not 0 <= self.id < 16:
            raise IRVerifyError(f"bar.red.{self.op} {self.id}: the operation is popc, and "
                                "or or, the id 0..15")
        return (U32 if self.op == "popc" else PRED,)


@register_op
@dataclass(frozen=True)
class BarArrive(_Effect):
    """``bar.arrive <id>, <count>``: the executing threads arrive on named barrier
    ``id`` of ``count`` threads (whole warps) and go on without waiting (PTX ISA, "bar,
    barrier"). The threads that ``bar.sync`` on it wait until all ``count`` arrived:
    a producer signals its consumers, or two warpgroups take turns (ping-pong)."""

    name: ClassVar[str] = "ptx.bar_arrive"
    id: int = 1
    count: int = 32

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        if not 0 <= self.id < 16 or self.count <= 0 or self.count % 32:
            raise IRVerifyError(f"bar.arrive {self.id}, {self.count}: the id is 0..15 and "
                                "the thread count a positive multiple of 32")
        return ()


__all__ = [
    "BINARY",
    "CLOCKS",
    "COMPARE",
    "SPECIAL_REGS",
    "UNARY",
    "WIDE_CLOCKS",
    "Bar",
    "BarArrive",
    "BarRed",
    "Binary",
    "Const",
    "Cvt",
    "Fma",
    "Load",
    "Pack",
    "Reduce",
    "Selp",
    "Setp",
    "SharedAlloc",
    "Shfl",
    "Special",
    "Store",
    "Unary",
    "Unpack",
]
