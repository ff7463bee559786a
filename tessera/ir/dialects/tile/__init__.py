"""Tile IR: the level of hand-written kernels (``@ts.kernel``) — types and structure.

A kernel is a :class:`~tessera.ir.core.Function` of kind ``tile.kernel``. Its body is
what *one tile* (one program instance) executes; the launch runs it for every tile of
every group. Values are

* ``tensor<...>`` — register tiles (rank 0 for scalars such as ids and loop indices);
* ``gmem<...>`` — a region of global memory (a kernel parameter or a view of one).
  ``gmem<[8]x1024x64xbf16>`` is a parameter with a *batch* dimension of 8 that the
  body never sees: the launch runs one program instance per batch index and the body
  sees the ``1024x64`` slice of its index;
* ``smem<...>`` — a region of a tile group's shared memory.

Control flow is structured (``tile.if``, ``tile.for``, ``tile.while``) with values
passed through region arguments and ``tile.yield``, like MLIR's ``scf`` dialect, so
every loop-carried and if-merged variable is explicit. Compute ops live in
:mod:`tessera.ir.dialects.tile.compute`, memory ops in :mod:`tessera.ir.dialects.tile.memory`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tessera.errors import IRParseError, IRVerifyError
from tessera.ir.core import (
    Instr,
    Op,
    Terminator,
    Type,
    check_count,
    register_op,
)
from tessera.ir.structured import StructuredFor, StructuredIf, StructuredOp, StructuredWhile
from tessera.ir.text import TYPE_PARSERS
from tessera.ir.types import Element, TensorType, element_text, parse_element
from tessera.numerics import dtype, storage_of

KERNEL = "tile.kernel"
INDEX = dtype("int64")
BOOL = dtype("bool")
SCALAR_INDEX = TensorType((), INDEX)
SCALAR_BOOL = TensorType((), BOOL)


@dataclass(frozen=True)
class MemRefType(Type):
    """A region of global (``gmem``) or shared (``smem``) memory of static shape."""

    space: str
    shape: tuple[int, ...]
    element: Element
    batch: int = 0

    def __post_init__(self) -> None:
        if self.space not in ("global", "shared"):
            raise IRVerifyError(f"memory space must be 'global' or 'shared', not {self.space!r}")
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def with_shape(self, shape: tuple[int, ...]) -> MemRefType:
        """The type of a view of this memory (views never carry the batch dim)."""
        return MemRefType(self.space, tuple(shape), self.element)

    def __str__(self) -> str:
        head = "gmem" if self.space == "global" else "smem"
        batch = f"[{self.batch}]x" if self.batch else ""
        dims = "".join(f"{d}x" for d in self.shape)
        return f"{head}<{batch}{dims}{element_text(self.element)}>"


def _parse_memref(space: str) -> Any:
    def parse(body: str) -> MemRefType:
        batch = 0
        if body.startswith("["):
            end = body.find("]x")
            if end < 0:
                raise IRParseError(f"bad batch dim in {body!r}")
            batch = int(body[1:end])
            body = body[end + 2:]
        dims: list[int] = []
        while True:
            head, sep, tail = body.partition("x")
            if sep and head.isdigit():
                dims.append(int(head))
                body = tail
                continue
            break
        return MemRefType(space, tuple(dims), parse_element(body), batch)
    return parse


TYPE_PARSERS["gmem"] = _parse_memref("global")
TYPE_PARSERS["smem"] = _parse_memref("shared")


def tensor_of(op: Op, t: Type) -> TensorType:
    """``t`` as a register tile type, or an IRVerifyError naming ``op``."""
    if not isinstance(t, TensorType):
        raise IRVerifyError(f"{op.name} expects a register tile, got {t}",
                            hint="load memory into a tile first (tile.load)")
    return t


def memref_of(op: Op, t: Type) -> MemRefType:
    """``t`` as a memory type, or an IRVerifyError naming ``op``."""
    if not isinstance(t, MemRefType):
        raise IRVerifyError(f"{op.name} expects global or shared memory, got {t}")
    return t


def scalar_of(op: Op, t: Type, kind: str = "") -> TensorType:
    """``t`` as a rank-0 tile (of ``kind`` 'int' or 'bool' when given)."""
    x = tensor_of(op, t)
    if x.rank != 0:
        raise IRVerifyError(f"{op.name} expects a scalar, got {x}")
    if kind and storage_of(x.element).kind != kind:
        raise IRVerifyError(f"{op.name} expects an {kind} scalar, got {x}")
    return x


# --------------------------------------------------------------------------- structure
@register_op
@dataclass(frozen=True)
class Return(Terminator):
    """Ends a kernel. Its operand (at most one) is the kernel's result: a ``gmem``
    parameter (returned after all tiles finish), a tile (written at the tile's output
    position) or a scalar (tile 0's value)."""

    name: ClassVar[str] = "tile.return"


@register_op
@dataclass(frozen=True)
class Yield(Terminator):
    """Ends a region of ``tile.if`` / ``tile.for`` / ``tile.while``; operands are the
    region's results (the next loop-carried values for loops)."""

    name: ClassVar[str] = "tile.yield"


@register_op
@dataclass(frozen=True)
class Condition(Terminator):
    """Ends the condition region of ``tile.while``: one bool scalar."""

    name: ClassVar[str] = "tile.condition"


@register_op
@dataclass(frozen=True)
class Constant(Op):
    """A scalar constant (int, float or bool) of one element format."""

    name: ClassVar[str] = "tile.constant"
    value: Any
    element: Element

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return (TensorType((), self.element),)


@dataclass(frozen=True)
class _Structured(StructuredOp):
    index_type: ClassVar[Type] = SCALAR_INDEX
    condition_type: ClassVar[Type] = SCALAR_BOOL
    condition_text: ClassVar[str] = "tile.condition(bool)"

    def check_condition(self, t: Type) -> None:
        scalar_of(self, t, "bool")

    def check_index(self, t: Type) -> None:
        scalar_of(self, t, "int")


@register_op
@dataclass(frozen=True)
class If(_Structured, StructuredIf):
    """``tile.if(%cond) ({then}, {else})``: both regions yield the result types."""

    name: ClassVar[str] = "tile.if"


@register_op
@dataclass(frozen=True)
class For(_Structured, StructuredFor):
    """``tile.for(%lo, %hi, %step, %init...)``: Python ``range(lo, hi, step)``, run
    sequentially. The region takes the index and the carried values and yields the
    next carried values; the results are the final carried values."""

    name: ClassVar[str] = "tile.for"


def constant_trips(loop: Instr) -> int | None:
    """The iteration count of a ``tile.for`` whose bounds and positive step are integer
    ``tile.constant``s; None for any other loop or op."""
    if not isinstance(loop.op, For):
        return None
    bounds = []
    for v in loop.operands[:3]:
        owner = v.owner
        if not (isinstance(owner, Instr) and isinstance(owner.op, Constant)
                and isinstance(owner.op.value, int)):
            return None
        bounds.append(owner.op.value)
    lo, hi, step = bounds
    return max(0, -(-(hi - lo) // step)) if step > 0 else None


@register_op
@dataclass(frozen=True)
class While(_Structured, StructuredWhile):
    """``tile.while(%init...) ({cond}, {body})``: both regions take the carried values;
    the first ends with ``tile.condition``, the second yields the next values."""

    name: ClassVar[str] = "tile.while"


# The program-id ops live in their own module and are re-exported here, so the whole
# structural vocabulary is ``tile.X``.
from tessera.ir.dialects.tile.ids import (  # noqa: E402
    Arange,
    GridCoord,
    GroupId,
    LaneId,
    LinearId,
    LocalId,
)

__all__ = ["BOOL", "INDEX", "KERNEL", "SCALAR_BOOL", "SCALAR_INDEX", "Arange", "Condition",
           "Constant", "For", "GridCoord", "GroupId", "If", "LaneId", "LinearId", "LocalId",
           "MemRefType",
           "Return", "While", "Yield", "constant_trips", "memref_of", "scalar_of", "tensor_of"]
