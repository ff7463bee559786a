"""Layout assignment for block kernels: which thread holds which element of a tensor.

Values that must share a layout (the operands and result of an elementwise op, a
loop's initial, carried, yielded and final values, an ``if``'s yields and results)
are joined in one class (union-find). A class that touches an ``mma`` (its result or
its accumulator operand) takes the accumulator layout of :mod:`tessera.lower.tiles`;
a row statistic reduced from it (``row_max``, ``row_sum``) and the row vectors it
meets take the matching row layout; every other tensor class takes the blocked
layout. Layouts are static facts, so lowering never moves data between threads
except where an op needs it (reductions, ``mma`` operands).
"""

from __future__ import annotations

from dataclasses import dataclass

from tessera.errors import UnsupportedError
from tessera.interp.tile.wide import possibly_wide
from tessera.ir.core import Function, Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.structured import value_slots
from tessera.ir.types import TensorType
from tessera.ir.unionfind import UnionFind
from tessera.numerics import storage_of


@dataclass(frozen=True)
class Acc:
    """The ``mma`` accumulator layout of a ``(rows, cols)`` tile (tiles.acc_coords)."""

    rows: int
    cols: int


@dataclass(frozen=True)
class Row:
    """A ``(rows,)`` vector held as the row statistics of an accumulator layout."""

    rows: int


@dataclass(frozen=True)
class Blocked:
    """Row-major elements dealt to the 128 threads ``vec`` at a time: element ``k`` is
    held by thread ``(k // vec) % 128`` as its register ``(k // (128 vec)) vec + k % vec``."""

    shape: tuple[int, ...]
    vec: int


    @property
    def chunks(self) -> int:
        """Chunks of ``vec`` elements in the tensor."""
        n = 1
        for d in self.shape:
            n *= d
        return n // self.vec

    @property
    def per_thread(self) -> int:
        """Chunks each thread holds (the last ones may lie past the end)."""
        return -(-self.chunks // 128)


@dataclass(frozen=True)
class BRow:
    """The row statistics of a blocked ``(rows, cols)`` tensor, held the way the
    tensor is: one register per chunk of ``parent``, the statistic of that chunk's row."""

    parent: Blocked


Layout = Acc | Row | Blocked | BRow


def as_blocked(layout: object) -> Blocked | None:
    """The blocked layout that holds the same registers as ``layout``, or None: a
    blocked layout itself, or the row statistics of rows one element wide (a ``(R, 1)``
    tile that shares its class with its own ``keepdims`` reduction), where register
    ``j`` is the statistic of chunk ``j``'s row, which is chunk ``j``'s one element."""
    if isinstance(layout, Blocked):
        return layout
    if isinstance(layout, BRow) and layout.parent.shape[-1] == 1:
        return layout.parent  # vec 1: a chunk is one element, one row
    return None

#: integer ``mma`` operand formats summed per thread (their products are exact in ``s32``)
INTEGER_MMA_OPERANDS = ("int8", "uint8")


def is_integer_mma(instr: Instr) -> bool:
    """Whether ``instr`` is an ``mma`` of byte integer tiles into an int32 accumulator:
    its tile is blocked and each thread sums its elements' products
    (:mod:`tessera.lower.exact.intmma`)."""
    if not isinstance(instr.op, tile_compute.Mma):
        return False
    types = [v.type for v in (*instr.operands[:2], instr.results[0])]
    if not all(isinstance(t, TensorType) for t in types):
        return False
    names = [storage_of(t.element).np_dtype.name for t in types]  # type: ignore[union-attr]
    return names[0] in INTEGER_MMA_OPERANDS and names[1] in INTEGER_MMA_OPERANDS and \
        names[2] == "int32"


def blocked(shape: tuple[int, ...]) -> Blocked:
    """The blocked layout of a tensor of ``shape``."""
    n = shape[-1]
    return Blocked(tuple(shape), 4 if n % 4 == 0 else 2 if n % 2 == 0 else 1)

_ELEMENTWISE = (tile_compute.Binary, tile_compute.Unary, tile_compute.Where, tile_compute.Cast,
                tile_compute.CausalMask)


def _tensor(v: Value) -> bool:
    return isinstance(v.type, TensorType) and v.type.rank > 0


def _unit_reshape(a: Value, b: Value) -> bool:
    def squeeze(v: Value) -> tuple[int, ...]:
        return tuple(d for d in v.type.shape if d != 1)  # type: ignore[attr-defined]
    return squeeze(a) == squeeze(b)


def _along_rows(r: Value, dims: tuple[int, ...]) -> bool:
    """Whether broadcasting ``r`` with ``dims`` (operand axis ``i`` is result axis
    ``dims[i]``) gives one value per row (a row statistic, ``m[:, None]``), which the row
    layout holds; a value per column (a bias row) is not."""
    shape = r.type.shape  # type: ignore[attr-defined]
    return all(d == 0 for size, d in zip(shape, dims) if size != 1)


def assign_layouts(fn: Function, integer_tensor_cores: bool = False) -> dict[Value, Layout]:
    """A layout for every tensor value of the block kernel ``fn``; its integer ``mma``
    tiles are accumulators with ``integer_tensor_cores``
    (:func:`tessera.lower.sm80.intmma.integer_tensor_cores`), else blocked."""
    cls = UnionFind[Value]()
    acc_roots: list[Value] = []
    rows_from: list[tuple[Value, Value]] = []  # (row vector, accumulator-class value)
    bcast: list[tuple[Value, Value, tuple[int, ...]]] = []  # (vector, 2-D result, dims)
    for instr in walk(fn.body):
        op = instr.op
        vals = [v for v in (*instr.operands, *instr.results) if _tensor(v)]
        if isinstance(op, _ELEMENTWISE):
            for v in vals[1:]:
                cls.join(vals[0], v)
        elif isinstance(op, tile_compute.Reshape) and len(vals) == 2 and _unit_reshape(*vals):
            cls.join(vals[0], vals[1])  # (R,) <-> (R, 1): the same values, the same threads
        elif isinstance(op, (tile_memory.MaskedLoad, tile_memory.MaskedStore)):
            for v in vals[1:]:  # the mask of each element is where its value is
                cls.join(vals[0], v)
        elif isinstance(op, tile_compute.Mma):
            # an exact mma's tile is blocked (tessera.lower.exact.mma), and so is an
            # integer one's (tessera.lower.exact.intmma: per-thread sums) unless its
            # sums provably stay inside s32 (tessera.lower.sm80.intmma: tensor cores)
            if not op.exact and (integer_tensor_cores or not is_integer_mma(instr)):
                acc_roots.append(instr.results[0])
            if len(instr.operands) == 3:
                cls.join(instr.operands[2], instr.results[0])
        elif isinstance(op, tile_compute.Reduce) and _tensor(instr.results[0]):
            src = instr.operands[0]
            if op.axis % src.type.rank == src.type.rank - 1:  # type: ignore[attr-defined]
                rows_from.append((instr.results[0], src))
            # (a reduction over another axis, a column sum, keeps the blocked layout of
            # its own shape: one value per column is no row statistic)
        elif isinstance(op, tile_compute.Broadcast) and _tensor(instr.operands[0]):
            bcast.append((instr.operands[0], instr.results[0], tuple(op.dims)))
        elif isinstance(op, (tile_ir.For, tile_ir.While, tile_ir.If)):
            for sources, targets in value_slots(instr):
                members = [v for v in (*sources, *targets) if _tensor(v)]
                for m in members[1:]:
                    cls.join(members[0], m)
    acc_classes = {cls.find(v) for v in acc_roots}
    row_classes = {cls.find(r) for r, src in rows_from if cls.find(src) in acc_classes}
    brow: dict[Value, Blocked] = {}
    for r, src in rows_from:
        if cls.find(src) not in acc_classes:
            brow[cls.find(r)] = blocked(src.type.shape)  # type: ignore[attr-defined]
    for r, b, dims in bcast:
        if cls.find(b) in acc_classes:
            if _along_rows(r, dims):
                row_classes.add(cls.find(r))
        elif b.type.rank == 2 and r.type.rank == 1 and _along_rows(r, dims):  # type: ignore[attr-defined]
            brow[cls.find(r)] = blocked(b.type.shape)  # type: ignore[attr-defined]
    out: dict[Value, Layout] = {}
    for instr in walk(fn.body):
        for v in (*instr.operands, *instr.results, *(a for reg in instr.regions
                                                     for a in reg.block.args)):
            if not _tensor(v) or v in out:
                continue
            t = v.type
            assert isinstance(t, TensorType)
            root = cls.find(v)
            if root in acc_classes:
                if t.rank != 2 or t.shape[0] % 64 or t.shape[1] % 8:
                    raise UnsupportedError(
                        f"an mma tile of shape {t.shape} has no accumulator layout",
                        hint="use tiles of 64k x 8n elements", loc=instr.loc)
                out[v] = Acc(*t.shape)
            elif root in row_classes:
                out[v] = Row(t.shape[0])  # (R,) or its (R, 1) reshape
            elif root in brow:
                out[v] = BRow(brow[root])
            else:
                out[v] = blocked(tuple(t.shape))
    return out


__all__ = ["INTEGER_MMA_OPERANDS", "Acc", "BRow", "Blocked", "Layout", "Row", "as_blocked",
           "assign_layouts", "blocked", "is_integer_mma", "possibly_wide", "value_slots"]
