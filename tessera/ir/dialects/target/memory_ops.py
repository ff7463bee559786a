"""Target IR memory instructions: ``ld``, ``st``, ``red``, ``.shared`` buffers and ``tex``
(PTX ISA 8.x, sections 9.7.9.8 "ld", 9.7.9.10 "st", 9.7.13.6 "red", 9.7.10.3 "tex");
:mod:`.ops` re-exports the first four with the register instructions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import U32, RegType, atomic_type_problem, reg_of


@dataclass(frozen=True)
class Effect(Op):
    """An instruction with side effects (memory, synchronisation)."""

    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        return ()



@register_op
@dataclass(frozen=True)
class Load(Op):
    """``ld.<space>{.vN}.<type> d, [addr + offset]`` (``space`` global, shared or param;
    ``vec`` 1, 2 or 4 registers); global addresses are ``u64``, shared ``u32``."""

    name: ClassVar[str] = "ptx.ld"
    pure: ClassVar[bool] = False  # memory may change between two identical loads
    space: str
    type: str
    vec: int = 1
    offset: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        reg_of(self, operands[0], "u64" if self.space == "global" else "u32")
        return (RegType(self.type, self.vec),)


@register_op
@dataclass(frozen=True)
class Store(Effect):
    """``st.<space>{.vN}.<type> [addr + offset], a``."""

    name: ClassVar[str] = "ptx.st"
    space: str
    type: str
    vec: int = 1
    offset: int = 0

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 2)
        reg_of(self, operands[0], "u64" if self.space == "global" else "u32")
        if operands[1] != RegType(self.type, self.vec):
            raise IRVerifyError(f"ptx.st stores reg<{self.vec}x{self.type}>, got {operands[1]}")


@register_op
@dataclass(frozen=True)
class Reduce(Effect):
    """``red.<space>.<op>.<type> [addr], a``: an atomic read-modify-write."""

    name: ClassVar[str] = "ptx.red"
    space: str
    op: str
    type: str

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        if problem := atomic_type_problem("red", self.op, self.type):
            raise IRVerifyError(problem)
        check_count(self, operands, 2)
        reg_of(self, operands[0], "u64" if self.space == "global" else "u32")
        reg_of(self, operands[1], self.type)


@register_op
@dataclass(frozen=True)
class SharedAlloc(Op):
    """A ``.shared .align <align> .b8 <sym>[<size>]`` buffer; the result is its ``u32``
    shared-window address (``mov.u32 %r, <sym>``)."""

    name: ClassVar[str] = "ptx.shared"
    sym: str
    size: int
    align: int = 16

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        if self.align & (self.align - 1) or self.size <= 0:
            raise IRVerifyError(f"shared buffer {self.sym}: bad size {self.size} or "
                                f"alignment {self.align}")
        return (U32,)


#: coordinates of each texture geometry
TEX_DIMS = {"1d": 1, "2d": 2, "3d": 3}


@register_op
@dataclass(frozen=True)
class TexFetch(Op):
    """``tex.<geom>.v4.<type>.<ctype> d, [tex, {c...}]``: four channels of ``type`` (f32,
    s32 or u32) fetched through the texture object ``tex`` (a ``u64`` handle) at
    ``geom``'s coordinates of ``ctype`` (f32, or s32 as ``tex1Dfetch`` gives them);
    :mod:`tessera.arch.texture` has what the unit computes."""

    name: ClassVar[str] = "ptx.tex"
    pure: ClassVar[bool] = False  # the texture's memory may change between fetches
    geom: str
    type: str
    ctype: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if self.geom not in TEX_DIMS or self.type not in ("f32", "s32", "u32") or \
                self.ctype not in ("f32", "s32"):
            raise IRVerifyError(f"ptx.tex: no fetch .{self.geom}.v4.{self.type}.{self.ctype}")
        check_count(self, operands, 1 + TEX_DIMS[self.geom])
        reg_of(self, operands[0], "u64")
        for c in operands[1:]:
            reg_of(self, c, self.ctype)
        return (RegType(self.type, 4),)


__all__ = ["TEX_DIMS", "Effect", "Load", "Reduce", "SharedAlloc", "Store", "TexFetch"]
