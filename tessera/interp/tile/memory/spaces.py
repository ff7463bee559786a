"""Runtime memories of the tile simulator: global tensors, shared buffers and views.

Shared memory is per group. A buffer's storage has one axis per group coordinate
(batch, g0, ...) followed by the buffer's shape, and each group axis is either full
or *compressed* to size 1 when every group holds the same contents there: a buffer
that was just allocated (all poison) or that every group filled from the same global
tile. Whole-buffer writes keep the compression of the written value (``cp_async`` of
``A[tile_m:..., k:...]`` varies along ``g0`` only), so a GEMM's shared tiles stay as
small as the data really is; partial writes expand the storage first. Storage that a
load handed out as a view is copied before it is written in place (copy-on-write), so
loaded tiles never change under the program.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import Loc
from tessera.interp.tile.memory.alias import SHADOWS
from tessera.numerics import Element, storage_of


def poison(shape: tuple[int, ...], np_dtype: np.dtype) -> np.ndarray:
    """Fresh memory: NaN for float formats that have one, else 0xFF bytes."""
    try:
        arr = np.full(shape, np.nan, dtype=np_dtype)
        if np.all(np.isnan(arr.astype(np.float32))):
            return arr
    except (TypeError, ValueError):
        pass
    return np.frombuffer(b"\xff" * (int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize),
                         dtype=np_dtype).reshape(shape).copy()


def fresh(kind: str, shape: tuple[int, ...], np_dtype: Any) -> np.ndarray:
    """A read-only poisoned (``kind`` "poison"), all-false ("unset") or all -1 ("none")
    array, shared by every buffer of its shape: read-only storage is copied before the
    first write (:class:`GroupArray`, :func:`writable`), so sharing it is safe, and a
    buffer that is only ever written whole never pays for its own."""
    key = (kind, shape, np.dtype(np_dtype))
    arr = _FRESH.get(key)
    if arr is None:
        if len(_FRESH) >= 64:
            _FRESH.clear()
        arr = poison(shape, np_dtype) if kind == "poison" else \
            np.zeros(shape, bool) if kind == "unset" else np.full(shape, -1, np_dtype)
        arr.flags.writeable = False
        _FRESH[key] = arr
    return arr


_FRESH: dict[tuple[Any, ...], np.ndarray] = {}


def writable(arr: np.ndarray) -> np.ndarray:
    """``arr``, or a private copy when it is read-only (shared fresh storage)."""
    return arr if arr.flags.writeable else arr.copy()


class GroupArray:
    """An array with leading group axes that may be compressed to size 1."""

    __slots__ = ("arr", "exported", "ng")

    def __init__(self, arr: np.ndarray, ng: int) -> None:
        self.arr = arr
        self.ng = ng
        self.exported = False

    def compressed(self) -> tuple[int, ...]:
        return self.arr.shape[:self.ng]

    def expanded(self, group_shape: tuple[int, ...]) -> np.ndarray:
        """The storage, full along every group axis and private (safe to write)."""
        full = tuple(group_shape) + self.arr.shape[self.ng:]
        if self.arr.shape != full or self.exported or not self.arr.flags.writeable:
            self.arr = np.array(np.broadcast_to(self.arr, full))
            self.exported = False
        return self.arr

    def fresh(self, full: tuple[int, ...]) -> np.ndarray:
        """New, private, uninitialised storage of shape ``full`` (every element is about
        to be written)."""
        self.arr = np.empty(full, self.arr.dtype)
        self.exported = False
        return self.arr

    def replace(self, value: np.ndarray) -> None:
        """Whole-storage replacement (keeps the value's compression)."""
        self.arr = value
        self.exported = True


class GlobalMem:
    """A kernel parameter in global memory (the array the user passed, or a copy)."""

    __slots__ = ("alias", "array", "batched", "element", "guard", "last_group", "name",
                 "np_dtype", "owner", "owner_epoch", "reader", "reader_epoch", "reader_group",
                 "saved", "track_owner", "track_reads", "written")

    def __init__(self, name: str, array: np.ndarray, element: Element, batched: bool) -> None:
        self.name = name
        self.array = array
        self.element = element
        self.np_dtype = storage_of(element).np_dtype
        self.batched = batched
        self.owner: np.ndarray | None = None
        self.owner_epoch: np.ndarray | None = None
        self.reader: np.ndarray | None = None
        self.reader_group: np.ndarray | None = None
        self.reader_epoch: np.ndarray | None = None
        self.last_group: np.ndarray | None = None
        #: reads are checked against writes of other programs (read-and-written tensors)
        self.track_reads = False
        #: writes record their tile per element (to find conflicts across ops)
        self.track_owner = True
        #: the kernel may write this tensor, so loads copy instead of returning views
        self.written = False
        #: the shared shadows of the parameters this one overlaps (tile_alias), if any
        self.alias: Any = None
        #: whether the first write saves the array, so that a failed launch restores it
        self.guard = False
        self.saved: np.ndarray | None = None

    @property
    def dims(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def label(self) -> str:
        if self.alias is not None:
            others = ", ".join(f"'{n}'" for n in self.alias.names if n != self.name)
            return f"global tensor '{self.name}' (its memory overlaps {others})"
        return f"global tensor '{self.name}'"

    def shadow(self, attr: str, fill: int) -> np.ndarray:
        """A per-element int32 shadow array, created on first use (a view of the alias
        space's buffer when the parameter overlaps another)."""
        arr = getattr(self, attr)
        if arr is None:
            arr = self.alias.view(self.array, attr) if self.alias is not None else \
                np.full(self.array.shape, fill, dtype=np.int32)
            setattr(self, attr, arr)
        return arr

    def before_write(self, journal: list[Any]) -> None:
        """Save the array before the launch's first write to it, when guarded, and
        note it in the launch's ``journal``."""
        if self.guard and self.saved is None:
            self.saved = self.array.copy()
            journal.append(self)

    def restore(self) -> None:
        """Put back the array as it was before the launch's first write."""
        if self.saved is not None:
            self.array[...] = self.saved
            self.saved = None

    def link(self, space: Any, reduced: bool) -> None:
        """Share the shadows of ``space`` with the parameters this one overlaps; they
        exist from the start, since another parameter's entries concern this one."""
        self.alias = space
        for attr, fill in SHADOWS.items():
            if attr != "last_group" or reduced:
                self.shadow(attr, fill)

    def reset_shadows(self) -> None:
        """Forget the sanitizer's entries (a run that starts over)."""
        if self.alias is not None:
            self.alias.reset()
            return
        for attr in ("owner", "owner_epoch", "reader", "reader_group", "reader_epoch"):
            setattr(self, attr, None)
        if self.last_group is not None:
            self.last_group = np.full(self.array.shape, -1, np.int32)


class SharedMem:
    """One shared buffer of every group, with the sanitizer's per-element state."""

    __slots__ = ("data", "element", "init", "loc", "np_dtype", "read", "reader", "shape",
                 "tag", "writer", "wrote")

    def __init__(self, shape: tuple[int, ...], element: Element, ng: int, loc: Loc,
                 checked: bool) -> None:
        self.shape = shape
        self.element = element
        self.np_dtype = storage_of(element).np_dtype
        self.loc = loc
        self.data = GroupArray(fresh("poison", (1,) * ng + shape, self.np_dtype), ng)
        # init None: every element written; tag None: no async copy pending.
        self.init: GroupArray | None = GroupArray(fresh("unset", (1,) * ng + shape, bool),
                                                  ng) if checked else None
        self.tag: GroupArray | None = None
        self.writer: np.ndarray | None = None
        self.reader: np.ndarray | None = None
        # whether ``writer`` / ``reader`` may hold an entry (are not all -1): the race
        # checks of the first accesses after a barrier are then skipped
        self.wrote = False
        self.read = False

    @property
    def dims(self) -> tuple[int, ...]:
        return self.shape

    @property
    def name(self) -> str:
        """How reports name the buffer (made when one does: most launches never report)."""
        return f"shared buffer allocated at {self.loc}"

    @property
    def label(self) -> str:
        return self.name


class Ref:
    """A view of a memory in every program: per-axis starts (ints or program-shaped
    arrays) and static sizes over the memory's axes; ``squeeze`` axes are hidden."""

    __slots__ = ("__weakref__", "mem", "sizes", "squeeze", "starts")

    def __init__(self, mem: Any, starts: tuple[Any, ...], sizes: tuple[int, ...],
                 squeeze: tuple[int, ...]) -> None:
        self.mem = mem
        self.starts = starts
        self.sizes = sizes
        self.squeeze = squeeze

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for d, n in enumerate(self.sizes) if d not in self.squeeze)

    def visible_axes(self) -> list[int]:
        return [d for d in range(len(self.sizes)) if d not in self.squeeze]

    def whole(self) -> bool:
        """Whether the view is all of its memory (uniform zero starts, full sizes)."""
        return all(isinstance(s, (int, np.integer)) and int(s) == 0 for s in self.starts) \
            and tuple(self.sizes) == tuple(self.mem.dims)

    def take_programs(self, ctx: Any, sel: np.ndarray) -> Ref:
        if not any(isinstance(s, np.ndarray) and s.ndim for s in self.starts):
            return self  # uniform starts: the same view in every program (Refs never change)
        starts = tuple(ctx.take_flat(s, sel) if isinstance(s, np.ndarray) and s.ndim else s
                       for s in self.starts)
        return Ref(self.mem, starts, self.sizes, self.squeeze)

    def merge_programs(self, ctx: Any, parts: list[tuple[np.ndarray, Any]]) -> Ref:
        refs = [r for _, r in parts]
        if any(r.mem is not self.mem or r.sizes != self.sizes or r.squeeze != self.squeeze
               for r in refs):
            from tessera.errors import UnsupportedError

            raise UnsupportedError("a memory variable refers to different tensors or "
                                   "shapes in different tiles after divergent control flow",
                                   hint="choose the memory with the same condition in "
                                        "every tile of the launch")
        starts = tuple(ctx.merge([(sel, r.starts[d]) for sel, r in parts], 0)
                       for d in range(len(self.starts)))
        return Ref(self.mem, starts, self.sizes, self.squeeze)


__all__ = ["GlobalMem", "GroupArray", "Ref", "SharedMem", "fresh", "poison", "writable"]
