"""Target IR: the PTX level — types and structure.

A kernel is a :class:`~tessera.ir.core.Function` of kind ``ptx.kernel`` whose body is
what *one thread* executes (PTX's model), with the hardware's registers as SSA values:

* ``reg<f32>`` — one register of a PTX type (``pred``, ``b16``..``b64``, ``u32``,
  ``s32``, ``u64``, ``s64``, ``f16``, ``bf16``, ``f32``, ``f64``, ``f16x2``, ``bf16x2``);
* ``reg<4xf32>`` — a register *vector*: an ``mma`` fragment, the 32 accumulators of a
  ``wgmma``, the four ``b32`` results of ``ldmatrix.x4`` (rendered as ``{%f0, ...}``);
* ``tmap<...>`` — a ``CUtensorMap`` kernel parameter (the 128-byte opaque struct TMA
  reads), with the tensor it describes.

Addresses are plain registers: ``u64`` generic/global addresses, ``u32`` shared-window
addresses. Control flow stays structured (``ptx.if``, ``ptx.for``, ``ptx.while``, as in
Tile IR) so the interpreter can run threads in lockstep with masks; the renderer turns
it into labels and predicated branches. A kernel's attributes record the target
(``sm_80`` or ``sm_90a``), the CTA shape (``block``), the grid and the parameter kinds.
Instructions live in :mod:`tessera.ir.dialects.target.ops`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRParseError, IRVerifyError
from tessera.ir.core import (
    Op,
    Terminator,
    Type,
    register_op,
)
from tessera.ir.structured import StructuredFor, StructuredIf, StructuredOp, StructuredWhile
from tessera.ir.text import TYPE_PARSERS

KERNEL = "ptx.kernel"
TARGETS = ("sm_80", "sm_86", "sm_89", "sm_90a")
#: the oldest PTX ISA ``.version`` each ``.target`` takes (PTX ISA, ".target": sm_80 PTX
#: 7.0, sm_86 7.1, sm_89 and sm_90 7.8; sm_90a, wgmma, TMA, expect_tx and
#: fence.proxy.async: 8.0)
TARGET_VERSIONS: dict[str, tuple[int, int]] = {
    "sm_80": (7, 0), "sm_86": (7, 1), "sm_89": (7, 8), "sm_90": (7, 8), "sm_90a": (8, 0)}

#: PTX register types: name -> (bits, kind); kind is f (float), u, s, b (untyped), p
REG_TYPES: dict[str, tuple[int, str]] = {
    "pred": (1, "p"), "b16": (16, "b"), "b32": (32, "b"), "b64": (64, "b"),
    "u16": (16, "u"), "u32": (32, "u"), "u64": (64, "u"), "s16": (16, "s"),
    "s32": (32, "s"), "s64": (64, "s"), "f16": (16, "f"), "bf16": (16, "f"),
    "f32": (32, "f"), "f64": (64, "f"), "f16x2": (32, "f"), "bf16x2": (32, "f"),
}

#: the fp8 pairs ``cvt`` packs into, and widens from, a 16-bit register (PTX ISA sec.
#: 9.7.9.21, sm_89): two e4m3 or e5m2 values, the first element in the low byte
FP8X2 = ("e4m3x2", "e5m2x2")


def cvt_needs(to: str, frm: str, satfinite: bool, arch: int = 90
              ) -> tuple[tuple[int, int], int]:
    """The oldest PTX ISA version and SM target with ``cvt{.satfinite}.<to>.<frm>``, as
    ptxas 13.5 enforces them (the renderer asks for them, the PTX reader checks them):
    the fp8 pairs sm_89 (PTX 8.1 there, 7.8 on sm_90: ``arch`` is the target in
    question); ``.satfinite`` PTX 8.1; ``cvt.f32.bf16`` PTX 7.1; bf16 to or from anything
    but f32 (itself included) sm_90 and PTX 7.8. ``((7, 0), 80)``: sm_80's first PTX."""
    if to in FP8X2 or frm in FP8X2:
        return ((8, 1) if arch < 90 else (7, 8)), 89
    version, sm = ((8, 1) if satfinite else (7, 0)), 80
    if "bf16" in (to, frm) and "f32" in (to, frm):
        version = max(version, (7, 1) if to == "f32" else (7, 0))
    elif "bf16" in (to, frm):  # (the packed bf16x2 forms are sm_80's)
        version, sm = max(version, (7, 8)), 90
    return version, sm


@dataclass(frozen=True)
class RegType(Type):
    """``count`` registers of PTX type ``elem`` (one register when ``count`` is 1)."""

    elem: str
    count: int = 1

    def __post_init__(self) -> None:
        if self.elem not in REG_TYPES:
            raise IRVerifyError(f"unknown PTX register type {self.elem!r}",
                                hint=f"use one of {', '.join(REG_TYPES)}")
        if self.count < 1:
            raise IRVerifyError(f"a register vector needs at least one register, not {self.count}")

    @property
    def bits(self) -> int:
        return REG_TYPES[self.elem][0]

    @property
    def kind(self) -> str:
        return REG_TYPES[self.elem][1]

    @property
    def scalar(self) -> RegType:
        """One register of this vector's type."""
        return RegType(self.elem)

    def __str__(self) -> str:
        return f"reg<{self.count}x{self.elem}>" if self.count > 1 else f"reg<{self.elem}>"


def _parse_reg(body: str) -> RegType:
    head, sep, tail = body.partition("x")
    if sep and head.isdigit():
        return RegType(tail, int(head))
    return RegType(body)


@dataclass(frozen=True)
class TensorMapType(Type):
    """A TMA tensor map over kernel argument ``arg`` (a 2-D global tensor of ``elem``),
    copying ``box`` (rows, cols) tiles with ``swizzle`` bytes (0, 32, 64 or 128)."""

    arg: int
    elem: str
    box: tuple[int, int]
    swizzle: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "box", tuple(int(b) for b in self.box))
        if self.swizzle not in (0, 32, 64, 128):
            raise IRVerifyError(f"tensor-map swizzle must be 0, 32, 64 or 128, not {self.swizzle}")

    def __str__(self) -> str:
        return f"tmap<{self.arg}, {self.elem}, {self.box[0]}x{self.box[1]}, sw{self.swizzle}>"


def _parse_tmap(body: str) -> TensorMapType:
    try:
        arg, elem, box, sw = (p.strip() for p in body.split(","))
        rows, cols = box.split("x")
        return TensorMapType(int(arg), elem, (int(rows), int(cols)), int(sw.removeprefix("sw")))
    except ValueError:
        raise IRParseError(f"bad tensor map type tmap<{body}>",
                           hint="write tmap<ARG, ELEM, ROWSxCOLS, swBYTES>") from None


TYPE_PARSERS["reg"] = _parse_reg
TYPE_PARSERS["tmap"] = _parse_tmap

PRED = RegType("pred")
U32 = RegType("u32")
S32 = RegType("s32")
U64 = RegType("u64")
F32 = RegType("f32")


def reg_of(op: Op, t: Type, *elems: str) -> RegType:
    """``t`` as a register type (one of ``elems`` when given), or an IRVerifyError."""
    if not isinstance(t, RegType) or (elems and t.elem not in elems):
        want = " or ".join(f"reg<{e}>" for e in elems) if elems else "a register"
        raise IRVerifyError(f"{op.name} expects {want}, got {t}")
    return t


#: the operand types each atomic operation takes (PTX ISA 8.x, sec. 9.7.13.5, ``atom``,
#: and 9.7.13.6, ``red``); ptxas rejects any other pairing, such as ``atom.min.f32``,
#: ``atom.add.s64`` or ``atom.and.u32``. The half-precision adds are written
#: ``add.noftz`` (:data:`HALF_ATOMICS`; bf16 from sm_90); their ``min``/``max`` come as
#: vectors only (:data:`VECTOR_ATOMICS`). ``red`` has no ``exch`` or ``cas``.
ATOMIC_TYPES: dict[str, tuple[str, ...]] = {
    "add": ("u32", "s32", "u64", "f32", "f64", "f16", "f16x2", "bf16", "bf16x2"),
    "min": ("u32", "s32", "u64", "s64"), "max": ("u32", "s32", "u64", "s64"),
    "inc": ("u32",), "dec": ("u32",),
    "and": ("b32", "b64"), "or": ("b32", "b64"), "xor": ("b32", "b64"),
    "exch": ("b32", "b64"), "cas": ("b16", "b32", "b64"),
}
#: the atomic types whose ``add`` keeps subnormals and says so (``.noftz``, required)
HALF_ATOMICS = ("f16", "f16x2", "bf16", "bf16x2")


def atomic_type_problem(head: str, op: str, elem: str) -> str | None:
    """Why ``<head>.<op>.<elem>`` (``head`` ``atom`` or ``red``) is not an instruction,
    or None when it is."""
    allowed = ATOMIC_TYPES.get(op)
    if allowed is None or (head == "red" and op in ("exch", "cas")):
        return f"{head} has no operation .{op}"
    if elem not in allowed:
        return (f"{head}.{op} takes {', '.join('.' + t for t in allowed)}, not .{elem} "
                "(PTX ISA, 'atom')")
    return None


#: vector atomics (sm_90, PTX 8.1; global or generic memory): the widths each element
#: type takes with ``.add`` (ptxas 13.5); each element is one atomic update
VECTOR_ATOMICS = {"f32": (2, 4), "f16": (2, 4, 8), "bf16": (2, 4, 8), "f16x2": (2, 4),
                  "bf16x2": (2, 4)}


def vector_atomic_problem(head: str, op: str, elem: str, vec: int, space: str) -> str | None:
    """Why ``<head>.<space>.<op>.v<vec>.<elem>`` is not an instruction, or None."""
    widths = VECTOR_ATOMICS.get(elem, ())
    if space not in ("global", ""):
        return f"vector {head} works on global memory, not .{space}"
    if op not in ("add", "min", "max") or not widths or (op != "add" and elem == "f32"):
        return (f"vector {head} adds .f32, .f16, .bf16, .f16x2 or .bf16x2 (and takes the "
                f"minimum or maximum of the 16-bit ones), not .{op}.{elem}")
    if vec not in widths:
        return f"vector {head}.{op}.{elem} is .v{' or .v'.join(map(str, widths))}, not .v{vec}"
    return None


# --------------------------------------------------------------------------- structure
@register_op
@dataclass(frozen=True)
class Return(Terminator):
    """Ends a kernel (``ret``); kernels return nothing, results go through memory."""

    name: ClassVar[str] = "ptx.ret"


@register_op
@dataclass(frozen=True)
class Yield(Terminator):
    """Ends a region of ``ptx.if`` / ``ptx.for`` / ``ptx.while``."""

    name: ClassVar[str] = "ptx.yield"


@register_op
@dataclass(frozen=True)
class Condition(Terminator):
    """Ends the condition region of ``ptx.while`` with one predicate."""

    name: ClassVar[str] = "ptx.condition"


@dataclass(frozen=True)
class _Structured(StructuredOp):
    index_type: ClassVar[Type] = S32
    condition_type: ClassVar[Type] = PRED
    condition_text: ClassVar[str] = "ptx.condition(pred)"

    def check_condition(self, t: Type) -> None:
        reg_of(self, t, "pred")

    def check_index(self, t: Type) -> None:
        reg_of(self, t, "s32")


@register_op
@dataclass(frozen=True)
class If(_Structured, StructuredIf):
    """``ptx.if(%p) ({then}, {else})``. Threads may diverge: each runs the region its
    predicate selects (``@%p bra``); both regions yield the results. ``rare`` marks a
    then region that almost no thread takes (a slow path): the static estimate leaves
    it out."""

    name: ClassVar[str] = "ptx.if"
    rare: bool = False


@register_op
@dataclass(frozen=True)
class For(_Structured, StructuredFor):
    """``ptx.for(%lo, %hi, %step, %init...)``: ``for (i = lo; i < hi; i += step)`` per
    thread (``s32`` bounds, positive step); the region takes the index and the carried
    values and yields the next ones. Threads may run different trip counts."""

    name: ClassVar[str] = "ptx.for"


@register_op
@dataclass(frozen=True)
class While(_Structured, StructuredWhile):
    """``ptx.while(%init...) ({cond}, {body})``, both regions over the carried values."""

    name: ClassVar[str] = "ptx.while"


__all__ = ["ATOMIC_TYPES", "F32", "FP8X2", "HALF_ATOMICS", "KERNEL", "PRED", "REG_TYPES", "S32",
           "TARGETS", "TARGET_VERSIONS", "U32", "U64", "VECTOR_ATOMICS", "Condition", "For",
           "If", "RegType", "Return", "TensorMapType", "While", "Yield", "atomic_type_problem",
           "cvt_needs", "reg_of", "vector_atomic_problem"]
