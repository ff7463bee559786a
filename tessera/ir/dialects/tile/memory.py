"""Tile IR memory ops: shared allocation, views, loads and stores, async copies, barriers.

Memory is addressed through *views*: ``tile.view(%A, %i, %j) {sizes = [64, 32]}`` is
the ``64x32`` region of ``%A`` starting at ``(%i, %j)``; axes listed in ``squeeze``
were indexed by a scalar and are dropped (``A[i]`` of a matrix is a row). A view's
sizes are static; its starts are runtime scalars, checked against the bounds when
the kernel runs (an out-of-bounds view is a sanitizer report).

``tile.store`` converts the stored tile to the memory's element (round to nearest even,
satfinite); ``tile.update`` is the read-modify-write of ``C[...] += x``: one op, applied
across tiles in a fixed order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.tile import BOOL, MemRefType, memref_of, scalar_of, tensor_of
from tessera.ir.types import Element, TensorType
from tessera.numerics import storage_of

#: the read-modify-write ops of augmented assignment (``+=`` ... ``//=``)
UPDATE_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "max", "min")


@dataclass(frozen=True)
class _Effect(Op):
    """An op with side effects on memory or synchronisation state."""

    pure: ClassVar[bool] = False


@register_op
@dataclass(frozen=True)
class AllocShared(_Effect):
    """Collective: every tile of a group gets the same fresh buffer (poisoned: NaN for
    floats, 0xFF bytes otherwise). ``swizzle`` and ``alignment`` are layout hints for
    the target (their values are verified); a swizzle moves addresses, not values, so
    the simulator's buffers are not swizzled."""

    name: ClassVar[str] = "tile.alloc_shared"
    shape: tuple[int, ...]
    element: Element
    swizzle: str = "none"
    alignment: int = 16

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        if self.swizzle not in ("none", "xor", "32B", "64B", "128B"):
            raise IRVerifyError(f"unknown swizzle {self.swizzle!r}",
                                hint="use 'none', 'xor', '32B', '64B' or '128B'")
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise IRVerifyError(f"alignment {self.alignment} is not a power of two")
        return (MemRefType("shared", self.shape, self.element),)


@register_op
@dataclass(frozen=True)
class AllocRegister(_Effect):
    """A register tile of ``shape`` (a scalar by default), uninitialised (NaN)."""

    name: ClassVar[str] = "tile.alloc_register"
    element: Element
    shape: tuple[int, ...] = ()

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return (TensorType(self.shape, self.element),)


@register_op
@dataclass(frozen=True)
class View(Op):
    """The region of the first operand starting at the other operands (one int scalar
    per axis) with static ``sizes``; axes in ``squeeze`` (size 1) are dropped. Bounds
    are checked when the kernel runs."""

    name: ClassVar[str] = "tile.view"
    sizes: tuple[int, ...]
    squeeze: tuple[int, ...] = ()

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if not operands:
            raise IRVerifyError("tile.view needs the memory to view")
        src = memref_of(self, operands[0])
        if len(operands) - 1 != src.rank or len(self.sizes) != src.rank:
            raise IRVerifyError(f"tile.view of {src} needs {src.rank} starts and sizes")
        for t in operands[1:]:
            scalar_of(self, t, "int")
        # a window larger than the memory is legal IR: it is an out-of-bounds access,
        # which the simulator reports at run time with the tile that made it
        if any(size < 0 for size in self.sizes):
            raise IRVerifyError(f"tile.view sizes {self.sizes} must be >= 0")
        if any(not 0 <= a < src.rank or self.sizes[a] != 1 for a in self.squeeze):
            raise IRVerifyError(f"tile.view can only squeeze axes of size 1, not {self.squeeze}")
        shape = tuple(s for a, s in enumerate(self.sizes) if a not in self.squeeze)
        return (src.with_shape(shape),)


@register_op
@dataclass(frozen=True)
class Select(Op):
    """One of several memories of one type, chosen by an int scalar (a Python list of
    shared buffers indexed by a variable, as in ``smem_a[write_stage]``)."""

    name: ClassVar[str] = "tile.select"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        if len(operands) < 2:
            raise IRVerifyError("tile.select takes an index and at least one memory")
        scalar_of(self, operands[0], "int")
        mems = [memref_of(self, t) for t in operands[1:]]
        if any(m != mems[0] for m in mems):
            raise IRVerifyError("tile.select chooses among memories of one type, got "
                                + ", ".join(map(str, mems)))
        return (mems[0],)


@register_op
@dataclass(frozen=True)
class Load(_Effect):
    """Read a memory view into a register tile."""

    name: ClassVar[str] = "tile.load"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        m = memref_of(self, operands[0])
        return (TensorType(m.shape, m.element),)


def _check_store(op: Op, operands: Sequence[Type]) -> tuple[MemRefType, TensorType]:
    check_count(op, operands, 2)
    m, v = memref_of(op, operands[0]), tensor_of(op, operands[1])
    if m.shape != v.shape:
        raise IRVerifyError(f"{op.name} of a {v.shape} tile into a {m.shape} view",
                            hint="broadcast the tile to the view's shape")
    return m, v


@register_op
@dataclass(frozen=True)
class Store(_Effect):
    """Write a tile into a view, converting to the memory's element."""

    name: ClassVar[str] = "tile.store"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        _check_store(self, operands)
        return ()


@register_op
@dataclass(frozen=True)
class Update(_Effect):
    """``view = view <op> tile`` as one read-modify-write (``C[...] += x``); tiles that
    update one element combine in a fixed order (see the simulator)."""

    name: ClassVar[str] = "tile.update"
    op: str = "add"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        _check_store(self, operands)
        if self.op not in UPDATE_OPS:
            raise IRVerifyError(f"tile.update op must be one of {', '.join(UPDATE_OPS)}")
        return ()


def _check_window(op: Op, operands: Sequence[Type],
                  extra: int) -> tuple[MemRefType, tuple[int, ...]]:
    """The memory and window shape of a masked access: ``(mem, starts..., extra...)``."""
    sizes, squeeze = op.sizes, op.squeeze  # type: ignore[attr-defined]
    if not operands:
        raise IRVerifyError(f"{op.name} needs the memory to access")
    src = memref_of(op, operands[0])
    if len(operands) != 1 + src.rank + extra or len(sizes) != src.rank:
        raise IRVerifyError(f"{op.name} of {src} needs {src.rank} starts and sizes")
    for t in operands[1:1 + src.rank]:
        scalar_of(op, t, "int")
    if any(size < 0 for size in sizes):
        raise IRVerifyError(f"{op.name} sizes {sizes} must be >= 0")
    if any(not 0 <= a < src.rank or sizes[a] != 1 for a in squeeze):
        raise IRVerifyError(f"{op.name} can only squeeze axes of size 1, not {squeeze}")
    return src, tuple(s for a, s in enumerate(sizes) if a not in squeeze)


def _check_mask(op: Op, t: Type, shape: tuple[int, ...]) -> None:
    m = tensor_of(op, t)
    if storage_of(m.element) != BOOL or m.shape != shape:
        raise IRVerifyError(f"{op.name} needs a bool mask of the window's shape {shape}, "
                            f"got {m}", hint="build it from comparisons of indices with "
                                            "the tensor's dims")


@register_op
@dataclass(frozen=True)
class MaskedLoad(_Effect):
    """``tile.masked_load(%A, %i, %j, %mask, %other) {sizes = [64, 32]}``: the window of
    ``%A`` at the starts (as ``tile.view``) read where ``%mask`` is true and ``%other``
    (a scalar, converted to the memory's element) elsewhere. The window may extend past
    the memory's edge: a masked-off element is never accessed (not read, not checked);
    a masked-on element outside the memory is an out-of-bounds access."""

    name: ClassVar[str] = "tile.masked_load"
    sizes: tuple[int, ...]
    squeeze: tuple[int, ...] = ()

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        src, shape = _check_window(self, operands, 2)
        _check_mask(self, operands[-2], shape)
        other = tensor_of(self, operands[-1])
        if other.rank:
            raise IRVerifyError(f"tile.masked_load's other value must be a scalar, got {other}")
        return (TensorType(shape, src.element),)


@register_op
@dataclass(frozen=True)
class MaskedStore(_Effect):
    """``tile.masked_store(%A, %i, %j, %value, %mask) {sizes = [64, 32]}``: write
    ``%value`` into the window where ``%mask`` is true (converting to the memory's
    element); masked-off elements are never accessed, even past the memory's edge."""

    name: ClassVar[str] = "tile.masked_store"
    sizes: tuple[int, ...]
    squeeze: tuple[int, ...] = ()

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        _, shape = _check_window(self, operands, 2)
        v = tensor_of(self, operands[-2])
        if v.shape != shape:
            raise IRVerifyError(f"tile.masked_store of a {v.shape} tile into a {shape} window",
                                hint="broadcast the tile to the window's shape")
        _check_mask(self, operands[-1], shape)
        return ()


@register_op
@dataclass(frozen=True)
class LoadVector(_Effect):
    """A vector load of ``width`` consecutive elements; the start must be aligned to
    the width (as a hardware vector load requires)."""

    name: ClassVar[str] = "tile.load_vector"
    width: int

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 1)
        m = memref_of(self, operands[0])
        if m.shape != (self.width,) or self.width not in (1, 2, 4, 8, 16):
            raise IRVerifyError(f"tile.load_vector of width {self.width} needs a "
                                f"({self.width},) view, got {m}",
                                hint="widths are 1, 2, 4, 8 or 16 elements")
        return (TensorType(m.shape, m.element),)


@register_op
@dataclass(frozen=True)
class StoreVector(_Effect):
    """A vector store of a 1-D tile (aligned to its width)."""

    name: ClassVar[str] = "tile.store_vector"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        m, _ = _check_store(self, operands)
        if m.rank != 1:
            raise IRVerifyError(f"tile.store_vector needs a 1-D view, got {m}")
        return ()


@register_op
@dataclass(frozen=True)
class CpAsync(_Effect):
    """Start an asynchronous copy from global into shared memory (same shape and
    format). It completes at ``cp_wait_group`` or ``barrier``; reading the destination
    earlier is a sanitizer report."""

    name: ClassVar[str] = "tile.cp_async"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 2)
        dst, src = memref_of(self, operands[0]), memref_of(self, operands[1])
        if dst.space != "shared" or src.space != "global":
            raise IRVerifyError(f"tile.cp_async copies global into shared memory, not "
                                f"{src.space} into {dst.space}")
        if dst.shape != src.shape or storage_of(dst.element) != storage_of(src.element):
            raise IRVerifyError(f"tile.cp_async copies {src} into {dst}: shapes and formats "
                                "must match", hint="cp.async copies bytes; cast after loading")
        return ()


@register_op
@dataclass(frozen=True)
class CpCommitGroup(_Effect):
    """Close the current group of async copies."""

    name: ClassVar[str] = "tile.cp_commit_group"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return ()


@register_op
@dataclass(frozen=True)
class CpWaitGroup(_Effect):
    """Wait until at most ``n`` committed copy groups of this tile are pending
    (uncommitted copies are committed first)."""

    name: ClassVar[str] = "tile.cp_wait_group"
    n: int = 0

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        if self.n < 0:
            raise IRVerifyError(f"cp_wait_group({self.n}): the count must be >= 0")
        return ()


@register_op
@dataclass(frozen=True)
class Barrier(_Effect):
    """Every tile of the group waits here; shared (and global) writes before it are
    visible after it, and pending async copies complete."""

    name: ClassVar[str] = "tile.barrier"

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return ()


__all__ = ["UPDATE_OPS", "AllocRegister", "AllocShared", "Barrier", "CpAsync",
           "CpCommitGroup", "CpWaitGroup", "Load", "LoadVector", "MaskedLoad",
           "MaskedStore", "Select", "Store",
           "StoreVector", "Update", "View"]
