"""Target IR instructions that PTX from other compilers needs beyond tessera's own.

nvcc and Triton read kernel parameters with ``ld.param``, convert between state-space
and generic addresses with ``cvta``, address memory generically, use atomics that return
the old value, and the bit-manipulation instructions (``shf``, ``prmt``, ``bfe``,
``bfi``, ``popc``, ``clz``, ``brev``) and warp votes. Semantics are those of the PTX ISA
(version 8.x, chapter 9, sections named in each docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import (
    PRED,
    U32,
    U64,
    RegType,
    TensorMapType,
    atomic_type_problem,
    reg_of,
    vector_atomic_problem,
)
from tessera.ir.dialects.target.memory_ops import check_order
from tessera.ir.dialects.target.warp_ops import ShflSync, Vote, WarpSync

#: generic-address windows: shared memory, each thread's local memory, the parameters
SHARED_WINDOW = 0x0800_0000
LOCAL_WINDOW = 0x0C00_0000
PARAM_WINDOW = 0x0400_0000
BIT_COUNTS = ("popc", "clz", "brev", "bfind")


@register_op
@dataclass(frozen=True)
class ParamLoad(Op):
    """``ld.param{.vN}.<type> d, [param + offset]``: a kernel parameter's bytes."""

    name: ClassVar[str] = "ptx.ld_param"
    param: str
    type: str
    offset: int = 0
    vec: int = 1

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return (RegType(self.type, self.vec),)


@register_op
@dataclass(frozen=True)
class Cvta(Op):
    """``cvta{.to}.<space>.u64 d, a`` (sec. 9.7.9.18): between an address of ``space``
    (global, shared, param) and a generic one. Global addresses are generic here;
    shared and parameter addresses live in windows of the generic space."""

    name: ClassVar[str] = "ptx.cvta"
    space: str
    to: bool = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "u64")
        if self.space not in ("global", "shared", "param", "local", "const"):
            raise IRVerifyError(f"cvta of unknown state space .{self.space}")
        return (U64,)


@register_op
@dataclass(frozen=True)
class GenericLoad(Op):
    """``ld{.<order>}{.vN}.<type> d, [a + offset]`` without a state space (sec.
    9.7.9.8): the generic address selects global or shared memory."""

    name: ClassVar[str] = "ptx.ld_generic"
    pure: ClassVar[bool] = False
    type: str
    vec: int = 1
    offset: int = 0
    order: str = ""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        check_order(self, "ld", self.order)
        reg_of(self, operands[0], "u64")
        return (RegType(self.type, self.vec),)


@register_op
@dataclass(frozen=True)
class GenericStore(Op):
    """``st{.<order>}{.vN}.<type> [a + offset], v`` without a state space."""

    name: ClassVar[str] = "ptx.st_generic"
    pure: ClassVar[bool] = False
    type: str
    vec: int = 1
    offset: int = 0
    order: str = ""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 2)
        check_order(self, "st", self.order)
        reg_of(self, operands[0], "u64")
        if operands[1] != RegType(self.type, self.vec):
            raise IRVerifyError(f"ptx.st_generic stores reg<{self.vec}x{self.type}>, got "
                                f"{operands[1]}")
        return ()


@register_op
@dataclass(frozen=True)
class ByteLoad(Op):
    """``ld.<space>{.vN}.u8|s8 d, [a + offset]`` (PTX has no 8-bit registers): one
    byte, or ``vec`` (2 or 4) consecutive bytes aligned to their total size, each zero-
    or sign-extended to a ``u32``/``s32`` register. ``space`` is global, shared, local
    or generic (empty); the address is ``u32`` for shared and local."""

    name: ClassVar[str] = "ptx.ld_byte"
    pure: ClassVar[bool] = False
    space: str
    signed: bool = False
    offset: int = 0
    vec: int = 1
    order: str = ""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        check_order(self, "ld", self.order)
        reg_of(self, operands[0], "u32" if self.space in ("shared", "shared::cluster", "local")
               else "u64")
        _byte_vector(self, self.vec)
        return (RegType("s32" if self.signed else "u32", self.vec),)


@register_op
@dataclass(frozen=True)
class ByteStore(Op):
    """``st.<space>{.vN}.u8|s8|b8 [a + offset], v``: the low byte of a 32-bit integer
    register (``b32``, ``u32`` or ``s32``; PTX lets ``st`` take a register wider than
    its type: PTX ISA, "Operand Size Exceeding Instruction-Type Size"), or of each of
    the ``vec`` (2 or 4) registers of a vector, into consecutive bytes."""

    name: ClassVar[str] = "ptx.st_byte"
    pure: ClassVar[bool] = False
    space: str
    offset: int = 0
    vec: int = 1
    order: str = ""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 2)
        check_order(self, "st", self.order)
        reg_of(self, operands[0], "u32" if self.space in ("shared", "shared::cluster", "local")
               else "u64")
        _byte_vector(self, self.vec)
        if reg_of(self, operands[1], "b32", "u32", "s32").count != self.vec:
            raise IRVerifyError(f"ptx.st_byte of {self.vec} bytes stores {self.vec} "
                                f"registers, got {operands[1]}")
        return ()


def _byte_vector(op: Op, vec: int) -> None:
    if vec not in (1, 2, 4):
        raise IRVerifyError(f"{op.name} moves 1, 2 or 4 bytes, not {vec}")


@register_op
@dataclass(frozen=True)
class Atom(Op):
    """``atom{.<order>}.<space>.<op>{.v<vec>}.<type> d, [a], b{, c}`` (sec. 9.7.13.5): a
    read-modify-write returning the old value; ``cas`` compares with ``b`` and stores
    ``c``. Updates apply one at a time in linear thread order. ``space`` is global,
    shared or generic (empty). A vector (sm_90) updates each of its ``vec`` consecutive
    elements on its own, atomically (``red`` reads as this without the result)."""

    name: ClassVar[str] = "ptx.atom"
    pure: ClassVar[bool] = False
    space: str
    op: str
    type: str
    vec: int = 1
    order: str = ""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_order(self, "atom", self.order)
        if problem := (atomic_type_problem("atom", self.op, self.type) or (
                self.vec > 1 and vector_atomic_problem("atom", self.op, self.type, self.vec,
                                                       self.space))):
            raise IRVerifyError(problem)
        check_count(self, operands, 3 if self.op == "cas" else 2)
        reg_of(self, operands[0], "u32" if self.space.startswith("shared") else "u64")
        for t in operands[1:]:
            if self.vec == 1:
                reg_of(self, t, self.type)
            elif t != RegType(self.type, self.vec):
                raise IRVerifyError(f"ptx.atom operand {t} is not {RegType(self.type, self.vec)}")
        return (RegType(self.type, self.vec),)


@register_op
@dataclass(frozen=True)
class Shf(Op):
    """``shf.<l|r>.<wrap|clamp>.b32 d, a, b, c`` (sec. 9.7.8.7): funnel shift of the
    64-bit ``b:a`` by ``c``; ``l`` keeps the high word, ``r`` the low word."""

    name: ClassVar[str] = "ptx.shf"
    left: bool
    clamp: bool

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        for t in operands:
            reg_of(self, t, "b32")
        return (RegType("b32"),)


@register_op
@dataclass(frozen=True)
class Prmt(Op):
    """``prmt.b32 d, a, b, c`` (sec. 9.7.8.8, default mode): byte ``i`` of ``d`` is byte
    ``c[4i+2:4i]`` of ``b:a``, replicated sign when bit ``4i+3`` of ``c`` is set."""

    name: ClassVar[str] = "ptx.prmt"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        for t in operands:
            reg_of(self, t, "b32")
        return (RegType("b32"),)


@register_op
@dataclass(frozen=True)
class Lop3(Op):
    """``lop3.b32 d, a, b, c, lut`` (sec. 9.7.8.6): any function of three bit vectors,
    bit ``i`` of ``d`` being bit ``(a_i << 2) | (b_i << 1) | c_i`` of ``lut``."""

    name: ClassVar[str] = "ptx.lop3"
    lut: int

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        if not 0 <= self.lut <= 0xFF:
            raise IRVerifyError(f"lop3 takes an 8-bit function table, not {self.lut}")
        for t in operands:
            reg_of(self, t, "b32")
        return (RegType("b32"),)


@register_op
@dataclass(frozen=True)
class Bfe(Op):
    """``bfe.<type> d, a, b, c`` (sec. 9.7.8.10): ``c`` bits of ``a`` from bit ``b``,
    sign-extended for signed types (both taken modulo 256)."""

    name: ClassVar[str] = "ptx.bfe"
    type: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 3)
        reg_of(self, operands[0], self.type)
        reg_of(self, operands[1], "u32")
        reg_of(self, operands[2], "u32")
        return (RegType(self.type),)


@register_op
@dataclass(frozen=True)
class Bfi(Op):
    """``bfi.<type> d, f, b, c, e`` (sec. 9.7.8.11): ``b`` with ``e`` bits from bit ``c``
    replaced by the low bits of ``f``."""

    name: ClassVar[str] = "ptx.bfi"
    type: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 4)
        reg_of(self, operands[0], self.type)
        reg_of(self, operands[1], self.type)
        reg_of(self, operands[2], "u32")
        reg_of(self, operands[3], "u32")
        return (RegType(self.type),)


@register_op
@dataclass(frozen=True)
class BitCount(Op):
    """``popc``, ``clz`` (u32 results), ``brev`` (same type) and ``bfind`` (position of
    the most significant non-sign bit, 0xFFFFFFFF when none) of a ``b32``/``b64``."""

    name: ClassVar[str] = "ptx.bitcount"
    kind: str
    type: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.kind not in BIT_COUNTS:
            raise IRVerifyError(f"unknown bit instruction {self.kind!r}")
        check_count(self, operands, 1)
        t = reg_of(self, operands[0], self.type)
        return (t if self.kind == "brev" else U32,)


@register_op
@dataclass(frozen=True)
class Stmatrix(Op):
    """``stmatrix.sync.aligned.m8n8.x<num>{.trans}.shared.b16 [p], {r...}`` (sec.
    9.7.14.5.16, sm_90): the inverse of ``ldmatrix``. Lanes ``8k .. 8k+7`` give the row
    addresses of matrix ``k``; register ``k`` of lane ``l`` holds row ``l/4`` of it,
    elements ``2(l%4)`` and ``+1`` (the transpose with ``trans``). ``offset``: bytes
    added to every row address (``[p+offset]``)."""

    name: ClassVar[str] = "ptx.stmatrix"
    pure: ClassVar[bool] = False
    num: int = 4
    trans: bool = False
    offset: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 2)
        reg_of(self, operands[0], "u32")
        if self.num not in (1, 2, 4) or operands[1] != RegType("b32", self.num):
            raise IRVerifyError(f"stmatrix.x{self.num} stores {self.num} b32 registers")
        return ()


@register_op
@dataclass(frozen=True)
class Elect(Op):
    """``elect.sync d|p, membermask`` (sec. 9.7.13.2): the lowest active member lane of
    each warp is elected; every lane gets its lane id in ``d`` and ``p`` true on it.
    The member mask is ``mask``, or the operand's value when there is one (a
    register)."""

    name: ClassVar[str] = "ptx.elect"
    pure: ClassVar[bool] = False
    mask: int = 0xFFFFFFFF

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if len(operands) > 1:
            check_count(self, operands, 1)
        if operands:
            reg_of(self, operands[0], "b32")
        return (RegType("b32"), PRED)


@register_op
@dataclass(frozen=True)
class TensorMapAt(Op):
    """The tensor map at a generic address (a ``.b8 [128]`` kernel parameter's address,
    from ``mov``/``cvta.param``), for ``cp.async.bulk.tensor``."""

    name: ClassVar[str] = "ptx.tmap_at"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "u64")
        return (TensorMapType(-1, "b8", (1, 1)),)


__all__ = ["BIT_COUNTS", "LOCAL_WINDOW", "PARAM_WINDOW", "SHARED_WINDOW", "Atom", "Bfe", "Bfi",
           "BitCount", "ByteLoad", "ByteStore", "Cvta", "Elect", "GenericLoad", "GenericStore",
           "Lop3", "ParamLoad", "Prmt", "Shf", "ShflSync", "Stmatrix", "TensorMapAt", "Vote",
           "WarpSync"]
