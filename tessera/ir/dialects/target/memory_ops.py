"""Target IR memory instructions: ``ld``, ``st``, ``red``, ``.shared`` buffers, ``tex``,
``suld`` and ``sust`` (PTX ISA 8.x, sections 9.7.9.8 "ld", 9.7.9.10 "st", 9.7.13.6 "red",
9.7.10.3 "tex", 9.7.11 "Surface Instructions"), and the addresses of distributed shared
memory, ``mapa`` and ``getctarank`` (sec. 9.7.9.21 and 9.7.9.22); :mod:`.ops`
re-exports the first four with the register instructions.

``space`` ``shared::cluster`` names a ``.shared::cluster`` access, which may reach the
shared memory of another CTA of the thread's cluster (:mod:`tessera.arch.cluster`).

``order`` is an access's memory order (PTX ISA sec. 8, "Memory Consistency Model"), as
written: ``""`` for a weak ``ld``/``st`` (and an ``atom``/``red`` of the default
``.relaxed.gpu``); ``"volatile"``; ``"mmio.relaxed.sys"``; or ``<semantics>.<scope>``
(``relaxed.gpu``, ``acquire.cta``, ``release.cluster``; ``atom`` and ``red`` may also
name either part alone). Every order but ``""`` makes a ``ld``/``st`` *strong*."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.arch.texture import SURFACE_MODES
from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.target import U32, RegType, atomic_type_problem, reg_of

#: the memory semantics each instruction takes, and the scopes of all of them
ORDER_SEMANTICS = {"ld": ("relaxed", "acquire"), "st": ("relaxed", "release"),
                   "atom": ("relaxed", "acquire", "release", "acq_rel"),
                   "red": ("relaxed", "release")}
MEMORY_SCOPES = ("cta", "cluster", "gpu", "sys")


def check_order(op: Op, head: str, order: str) -> None:
    """Raise unless ``order`` is a memory order of ``head`` (ld, st, atom or red)."""
    parts = order.split(".") if order else []
    if head in ("ld", "st"):
        ok = order in ("", "volatile", "mmio.relaxed.sys") or (
            len(parts) == 2 and parts[0] in ORDER_SEMANTICS[head] and parts[1] in MEMORY_SCOPES)
    else:  # atom and red: semantics and scope each optional
        sems = parts[:1] if parts[:1] and parts[0] in ORDER_SEMANTICS[head] else []
        ok = all(x in MEMORY_SCOPES for x in parts[len(sems):]) and len(parts) - len(sems) < 2
    if not ok:
        raise IRVerifyError(f"{op.name} has no memory order {order!r}")


def releases(order: str) -> bool:
    """Whether an access of ``order`` is a release (``.release``, ``.acq_rel``)."""
    return order.startswith(("release", "acq_rel"))


def acquires(order: str) -> bool:
    """Whether an access of ``order`` is an acquire (``.acquire``, ``.acq_rel``)."""
    return order.startswith(("acquire", "acq_rel"))


@dataclass(frozen=True)
class Effect(Op):
    """An instruction with side effects (memory, synchronisation)."""

    pure: ClassVar[bool] = False

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        return ()



@register_op
@dataclass(frozen=True)
class Load(Op):
    """``ld{.<order>}.<space>{.vN}.<type> d, [addr + offset]`` (``space`` global, shared
    or param; ``vec`` 1, 2 or 4 registers); global addresses are ``u64``, shared
    ``u32``."""

    name: ClassVar[str] = "ptx.ld"
    pure: ClassVar[bool] = False  # memory may change between two identical loads
    space: str
    type: str
    vec: int = 1
    offset: int = 0
    order: str = ""

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        check_order(self, "ld", self.order)
        reg_of(self, operands[0], "u64" if self.space == "global" else "u32")
        return (RegType(self.type, self.vec),)


@register_op
@dataclass(frozen=True)
class Store(Effect):
    """``st{.<order>}.<space>{.vN}.<type> [addr + offset], a``."""

    name: ClassVar[str] = "ptx.st"
    space: str
    type: str
    vec: int = 1
    offset: int = 0
    order: str = ""

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_count(self, operands, 2)
        check_order(self, "st", self.order)
        reg_of(self, operands[0], "u64" if self.space == "global" else "u32")
        if operands[1] != RegType(self.type, self.vec):
            raise IRVerifyError(f"ptx.st stores reg<{self.vec}x{self.type}>, got {operands[1]}")


@register_op
@dataclass(frozen=True)
class Reduce(Effect):
    """``red{.<order>}.<space>.<op>.<type> [addr], a``: an atomic read-modify-write."""

    name: ClassVar[str] = "ptx.red"
    space: str
    op: str
    type: str
    order: str = ""

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        check_order(self, "red", self.order)
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


#: a surface access's register type for the size it moves (bytes travel in 16-bit
#: registers, zero-extended)
SURFACE_REG = {"b8": "b16", "b16": "b16", "b32": "b32", "b64": "b64"}


def _surface_check(op: SurfaceLoad | SurfaceStore, operands: Sequence[Type], n: int) -> None:
    if op.geom not in TEX_DIMS or op.vec not in (1, 2, 4) or op.type not in SURFACE_REG or \
            op.mode not in SURFACE_MODES or \
            op.vec * int(op.type[1:]) > 128:
        raise IRVerifyError(f"{op.name}: no access .b.{op.geom}.v{op.vec}.{op.type}.{op.mode}")
    check_count(op, operands, n)
    reg_of(op, operands[0], "u64")
    for c in operands[1:1 + TEX_DIMS[op.geom]]:
        reg_of(op, c, "s32", "b32", "u32")


@register_op
@dataclass(frozen=True)
class SurfaceLoad(Op):
    """``suld.b.<geom>{.vN}.<type>.<mode> d, [surf, {x, y, z}]``: raw bytes from the
    surface object ``surf`` (u64), x a byte offset; ``mode`` (trap, clamp or zero) says
    what an access outside does (:class:`tessera.arch.texture.Surface`)."""

    name: ClassVar[str] = "ptx.suld"
    pure: ClassVar[bool] = False
    geom: str
    vec: int
    type: str
    mode: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        _surface_check(self, operands, 1 + TEX_DIMS[self.geom])
        return (RegType(SURFACE_REG[self.type], self.vec),)


@register_op
@dataclass(frozen=True)
class SurfaceStore(Effect):
    """``sust.b.<geom>{.vN}.<type>.<mode> [surf, {x, y, z}], a``: raw bytes into the
    surface object ``surf``."""

    name: ClassVar[str] = "ptx.sust"
    geom: str
    vec: int
    type: str
    mode: str

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        _surface_check(self, operands, 2 + TEX_DIMS[self.geom])
        if operands[-1] != RegType(SURFACE_REG[self.type], self.vec):
            raise IRVerifyError(f"ptx.sust stores reg<{self.vec}x{SURFACE_REG[self.type]}>, "
                                f"got {operands[-1]}")




def _cluster_address(op: Op, space: str, t: Type) -> None:
    """``t`` as the address operand of a ``mapa``/``getctarank`` of ``space``: a shared
    address (u32 or u64) or, with no space, a generic one (u64)."""
    if space not in ("", "shared::cluster"):
        raise IRVerifyError(f"{op.name} takes .shared::cluster or generic addresses, not "
                            f".{space}")
    reg = reg_of(op, t)
    if reg.elem not in ("u32", "u64") or (not space and reg.elem != "u64"):
        raise IRVerifyError(f"{op.name}: a {'generic' if not space else 'shared'} address "
                            f"is {'u64' if not space else 'u32 or u64'}, not {reg}")


@register_op
@dataclass(frozen=True)
class Mapa(Op):
    """``mapa{.shared::cluster}.<u32|u64> d, a, rank``: the address, in the shared
    memory of the cluster's CTA ``rank``, of what ``a`` names in the executing CTA's;
    ``space`` ``shared::cluster`` maps shared addresses, ``""`` generic ones."""

    name: ClassVar[str] = "ptx.mapa"
    space: str = "shared::cluster"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 2)
        _cluster_address(self, self.space, operands[0])
        reg_of(self, operands[1], "u32")
        return (operands[0],)


@register_op
@dataclass(frozen=True)
class GetCtaRank(Op):
    """``getctarank{.shared::cluster}.<u32|u64> d, a``: the rank in the cluster of the
    CTA whose shared memory the address ``a`` lies in."""

    name: ClassVar[str] = "ptx.getctarank"
    space: str = "shared::cluster"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        _cluster_address(self, self.space, operands[0])
        return (U32,)


__all__ = ["MEMORY_SCOPES", "ORDER_SEMANTICS", "SURFACE_REG", "TEX_DIMS", "Effect", "GetCtaRank",
           "Load", "Mapa", "Reduce", "SharedAlloc", "Store", "SurfaceLoad", "SurfaceStore",
           "TexFetch", "acquires", "check_order", "releases"]
