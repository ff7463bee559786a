"""Target IR instructions of warp-specialised kernels (sm_90a): ``setmaxnreg`` and
``elect.sync`` (PTX ISA 8.x, sec. 9.7.19.6 and 9.7.13.13; both need PTX 8.0, sm_90a for
``setmaxnreg``); and the warp collectives ``vote.sync``, ``match.sync`` and
``redux.sync``, the warp reduction of integers (sec. 9.7.12.4, 9.7.13.10, 9.7.13.11);
``shfl.sync`` and ``bar.warp.sync`` (sec. 9.7.8.6, 9.7.13.1).

A warp-specialised kernel splits its CTA into warpgroups with different jobs: a
producer warpgroup, of which one elected thread issues the TMA loads, gives registers
back with ``setmaxnreg.dec`` so that the consumer warpgroups running ``wgmma`` can take
more with ``setmaxnreg.inc``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import PRED, RegType, reg_of

#: ``setmaxnreg`` takes a multiple of 8 in this range (PTX ISA sec. 9.7.19.6)
MAXNREG_RANGE = (24, 256)


@register_op
@dataclass(frozen=True)
class SetMaxNReg(Op):
    """``setmaxnreg.{inc,dec}.sync.aligned.u32 count``: every thread of the warpgroup
    that executes it (all four warps, converged) gets at most ``count`` registers from
    now on; ``inc`` waits until the register file has them, ``dec`` releases them."""

    name: ClassVar[str] = "ptx.setmaxnreg"
    count: int
    inc: bool = True
    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        lo, hi = MAXNREG_RANGE
        if self.count % 8 or not lo <= self.count <= hi:
            raise IRVerifyError(f"setmaxnreg takes a multiple of 8 in [{lo}, {hi}], not "
                                f"{self.count}")
        return ()


def _member_mask(op: Op, operands: Sequence[Type], fixed: int) -> None:
    """A warp instruction's member mask: ``fixed`` operands, then an optional ``b32``
    register (a mask in a register: ``__activemask()``'s), else the ``mask`` attribute."""
    if len(operands) not in (fixed, fixed + 1):
        raise IRVerifyError(f"{op.name} takes {fixed} operand(s) and an optional member-mask "
                            f"register, got {len(operands)}")
    if len(operands) > fixed:
        reg_of(op, operands[fixed], "b32", "u32")


@register_op
@dataclass(frozen=True)
class Vote(Op):
    """``vote.sync.<mode>`` (sec. 9.7.12.4): ``all``/``any``/``uni`` predicates or the
    ``ballot`` bit mask of the member lanes (``activemask`` when ``mode`` is
    ``active``, with no operand); the member mask is ``mask`` or a second operand."""

    name: ClassVar[str] = "ptx.vote"
    pure: ClassVar[bool] = False
    mode: str
    mask: int = 0xFFFFFFFF

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.mode == "active":
            check_count(self, operands, 0)
            return (RegType("b32"),)
        _member_mask(self, operands, 1)
        reg_of(self, operands[0], "pred")
        return (RegType("b32"),) if self.mode == "ballot" else (PRED,)


@register_op
@dataclass(frozen=True)
class Match(Op):
    """``match.{any,all}.sync.<type> d, a, membermask`` (sec. 9.7.13.10): ``any`` gives
    each member the mask of the member lanes whose ``a`` equals its own; ``all`` gives
    the member mask where every member's ``a`` is equal, else 0, and that fact as a
    predicate (``d|p``). The member mask is ``mask`` or a second operand."""

    name: ClassVar[str] = "ptx.match"
    pure: ClassVar[bool] = False
    mode: str
    type: str
    mask: int = 0xFFFFFFFF

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.mode not in ("any", "all") or self.type not in ("b32", "b64"):
            raise IRVerifyError(f"match.{self.mode}.sync.{self.type}: the mode is any or "
                                "all, the type b32 or b64")
        _member_mask(self, operands, 1)
        reg_of(self, operands[0], self.type)
        return (RegType("b32"),) if self.mode == "any" else (RegType("b32"), PRED)


#: redux.sync's operations and the type each takes
REDUX_TYPES = {"add": ("u32", "s32"), "min": ("u32", "s32"), "max": ("u32", "s32"),
               "and": ("b32",), "or": ("b32",), "xor": ("b32",)}


@register_op
@dataclass(frozen=True)
class Redux(Op):
    """``redux.sync.<op>.<type> d, a, membermask``: every member lane gets ``op`` over
    the member lanes' ``a`` (``add`` wraps modulo 2^32); all members must execute it.
    The member mask is ``mask`` or a second operand."""

    name: ClassVar[str] = "ptx.redux"
    pure: ClassVar[bool] = False
    op: str
    type: str
    mask: int = 0xFFFFFFFF

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.type not in REDUX_TYPES.get(self.op, ()):
            raise IRVerifyError(f"redux.sync.{self.op} does not take .{self.type}")
        _member_mask(self, operands, 1)
        reg_of(self, operands[0], self.type)
        return (RegType(self.type),)


@register_op
@dataclass(frozen=True)
class ShflSync(Op):
    """``shfl.sync.<mode>.b32 d|p, a, b, c, membermask`` (sec. 9.7.8.6) with every
    operand a register or immediate: the value of lane ``j`` (from ``b`` and the clamp
    and segment mask ``c``) and whether ``j`` lay inside the clamp range."""

    name: ClassVar[str] = "ptx.shfl_sync"
    pure: ClassVar[bool] = False
    mode: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 4)
        reg_of(self, operands[0], "b32")
        for t in operands[1:]:
            reg_of(self, t, "u32")
        if self.mode not in ("up", "down", "bfly", "idx"):
            raise IRVerifyError(f"unknown shuffle mode {self.mode!r}")
        return (RegType("b32"), PRED)


@register_op
@dataclass(frozen=True)
class WarpSync(Op):
    """``bar.warp.sync membermask`` (sec. 9.7.13.1): the member lanes of a warp wait for
    each other; their memory accesses before it are ordered before those after it."""

    name: ClassVar[str] = "ptx.warp_sync"
    pure: ClassVar[bool] = False
    mask: int = 0xFFFFFFFF

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return ()


__all__ = ["MAXNREG_RANGE", "REDUX_TYPES", "Match", "Redux", "SetMaxNReg", "ShflSync", "Vote",
           "WarpSync"]
