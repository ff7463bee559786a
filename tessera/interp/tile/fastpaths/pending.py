"""Deferred K-loop accumulators: the products of a GEMM's K loop made by one call.

A ``tile.for`` whose carried accumulator feeds nothing but the next trip's ``mma``
(:func:`deferrable`) carries a :class:`PendingMma` instead: the trips' operands are kept,
and the loop's end makes one product over the whole K with
:func:`tessera.interp.tile.mma.mma` (that module says why the result is the per-trip
accumulation's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.tile.memory.access import view_in_owner
from tessera.interp.tile.mma import mma
from tessera.interp.tile.numeric import F32, F64, Num, num, widen
from tessera.ir.core import Instr, Value, walk
from tessera.ir.dialects.tile.compute import Add, Mma
from tessera.numerics.reductions.accumulator import add_exact, exact_products, to_exact

#: released operand buffers of :class:`PendingMma`, reused by the next launch: a fresh
#: buffer costs a page fault per 4 KiB on first write (half the copying time of a
#: 1024-square GEMM). At most this many are kept, newest first.
_POOL: list[np.ndarray] = []
_POOL_SIZE = 4
#: larger buffers are freed, not kept
_POOL_MAX_BYTES = 64 << 20


def _buffer(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    for k, buf in enumerate(_POOL):
        if buf.shape == shape and buf.dtype == dtype:
            return _POOL.pop(k)
    return np.empty(shape, dtype)


def _release(*bufs: np.ndarray) -> None:
    _POOL[:0] = [b for b in bufs if b.nbytes <= _POOL_MAX_BYTES]
    del _POOL[_POOL_SIZE:]


class PendingMma:
    """An accumulator ``base + sum_j a_j @ b_j`` whose products are not yet computed.

    A K loop whose carried accumulator feeds nothing but the next trip's ``mma`` (a
    tiled GEMM's ``acc = mma(a_k, b_k, acc)``) holds it in this form: each trip only
    keeps its operands (tile values are never modified in place, so a reference is as
    good as a copy), and the loop's end (:meth:`force`) copies them into K-concatenated
    buffers, converted as :func:`mma` would, and makes one product over the whole K: one
    BLAS call instead of one per trip plus an add per trip. Operands that are
    consecutive K slices of one array (a GEMM's ``A[..., k:k+BK]`` staged unchanged
    through shared memory) are copied as one view, not slice by slice; the buffers are
    the same either way. In exact mode the result is still the float64 sum of the exact
    products, rounded once at the store; only the order of the float64 additions is
    BLAS's over the whole K instead of per trip, which the module docstring allows. An
    ``exact`` accumulator (an exact ``mma``'s, in checked mode) gets the exact products
    of the whole K (buffers in the operands' own formats, kept by the accumulator):
    an exact sum, whatever the grouping of its terms. At
    most :data:`MAX_K` columns of K are held before their product is added into
    ``base``: the grouping depends on the trips only, not on how many programs run at
    once.
    """

    __slots__ = ("a", "acc", "b", "base", "dtype", "exact", "k", "trips", "width")

    #: K columns held before the products so far are added into ``base``
    MAX_K = 8192

    def __init__(self, base: Any, acc: Num, fast: bool, trips: int,
                 exact: bool = False) -> None:
        self.base, self.acc, self.trips, self.exact = base, acc, trips, exact
        if acc.kind in ("int", "bool"):
            self.dtype = np.dtype(np.int64)
        else:
            self.dtype = F32 if fast and acc.sd != F64 else F64
        self.a: list[np.ndarray] = []
        self.b: list[np.ndarray] = []
        self.k = self.width = 0

    def add(self, a: np.ndarray, b: np.ndarray) -> PendingMma:
        """Keep one trip's operands."""
        kk = a.shape[-1]
        self.trips -= 1
        if self.a and (self.a[0].shape[:-1] != a.shape[:-1]
                       or self.b[0].shape[:-2] != b.shape[:-2]
                       or self.b[0].shape[-1] != b.shape[-1]
                       or self.k + kk > self.width):
            self.base = self.force()
        if not self.a:
            self.width = kk * max(1, min(self.trips + 1, self.MAX_K // max(kk, 1)))
        self.a.append(a)
        self.b.append(b)
        self.k += kk
        return self

    def extend_last(self, a: np.ndarray, b: np.ndarray, trips: int) -> bool:
        """Replace the last kept operands by ``a`` and ``b``, which hold them followed
        by the operands of ``trips`` more trips along K: the buffers get the same
        values as from adding those trips one by one. False, with nothing changed, when
        they do not fit the K columns held now (adding them would flush on the way)."""
        if not self.a:
            return False
        kk = a.shape[-1] - self.a[-1].shape[-1]
        if self.k + kk > self.width or b.shape[-2] - self.b[-1].shape[-2] != kk:
            return False
        self.a[-1], self.b[-1] = a, b
        self.k += kk
        self.trips -= trips
        return True

    def force(self) -> Any:
        """The accumulator's value, as the per-trip ``mma`` calls would give it; the
        buffers are released."""
        if not self.a:
            return self.base
        k, pa, pb = self.k, self.a, self.b
        self.a, self.b, self.k = [], [], 0
        if self.exact:
            return self._force_exact(k, pa, pb)
        a = _buffer((*pa[0].shape[:-1], self.width), self.dtype)
        # K outermost in memory: folding b's program axes into its columns
        # (folded_matmul) is then a view, not a copy
        kb = _buffer((self.width, *pb[0].shape[:-2], pb[0].shape[-1]), self.dtype)
        b = kb.transpose((*range(1, kb.ndim - 1), 0, kb.ndim - 1))  # np.moveaxis(kb, 0, -2)
        _gather(a[..., :k], pa, -1)
        _gather(b[..., :k, :], pb, -2)
        out = mma(a[..., :k], b[..., :k, :], self.base, self.acc, fast=self.dtype == F32)
        _release(a, kb)  # the product no longer refers to them
        return out


    def _force_exact(self, k: int, pa: list[np.ndarray], pb: list[np.ndarray]) -> Any:
        """The exact accumulator ``base + [a_1 .. a_J] @ [b_1; ..; b_J]``: fresh
        buffers (the accumulator keeps them until it is rounded)."""
        a = np.empty((*pa[0].shape[:-1], k), pa[0].dtype)
        kb = np.empty((k, *pb[0].shape[:-2], pb[0].shape[-1]), pb[0].dtype)
        b = kb.transpose((*range(1, kb.ndim - 1), 0, kb.ndim - 1))
        _gather(a, pa, -1)
        _gather(b, pb, -2)
        return add_exact(to_exact(self.base), exact_products(a, b))


def _gather(dst: np.ndarray, pieces: list[np.ndarray], axis: int) -> None:
    """Copy ``pieces`` side by side along ``axis`` into ``dst``: with one copy when
    they are consecutive slices of one array, else piece by piece."""
    whole = _joined(pieces, axis)
    if whole is not None:
        _copy(dst, whole)
        return
    at = 0
    for p in pieces:
        n = p.shape[axis]
        index = [slice(None)] * dst.ndim
        index[axis] = slice(at, at + n)
        _copy(dst[tuple(index)], p)
        at += n


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``, widening exactly (one-byte formats by table, see
    :func:`~tessera.interp.tile.numeric.widen`)."""
    if src.dtype != dst.dtype and src.dtype.itemsize == 1:
        src = widen(src, dst.dtype)
    np.copyto(dst, src, casting="unsafe")


def _joined(pieces: list[np.ndarray], axis: int) -> np.ndarray | None:
    """The read-only view that ``pieces`` make together along ``axis``, when each starts
    where the previous one ends in the same array (same strides, same root), else None."""
    first = pieces[0]
    if len(pieces) == 1 or type(first) is not np.ndarray:
        return None
    root = _root(first)
    step = first.strides[axis]
    at = first.__array_interface__["data"][0]
    for p in pieces:
        if (type(p) is not np.ndarray or p.dtype != first.dtype or p.strides != first.strides
                or p.shape[:axis % p.ndim] != first.shape[:axis % p.ndim]
                or p.shape[axis % p.ndim + 1:] != first.shape[axis % p.ndim + 1:]
                or p.__array_interface__["data"][0] != at or _root(p) is not root):
            return None
        at += p.shape[axis] * step
    shape = list(first.shape)
    shape[axis] = sum(p.shape[axis] for p in pieces)
    joined = view_in_owner(first, 0, tuple(shape), first.strides, False)
    if joined is not None:
        return joined
    return np.lib.stride_tricks.as_strided(first, tuple(shape), first.strides,
                                           writeable=False)


def _root(x: Any) -> Any:
    """The object that owns ``x``'s memory, following ``base`` links (views, and the
    wrappers ``as_strided`` leaves between a view and its array)."""
    while getattr(x, "base", None) is not None:
        x = x.base
    return x


def forced(x: Any) -> Any:
    """``x``, or the value of a :class:`PendingMma` accumulator."""
    return x.force() if isinstance(x, PendingMma) else x


def deferrable(loop: Instr, fused: dict[Instr, Instr],
               fast: bool = False) -> dict[int, tuple[Num, bool]]:
    """The carried values of a ``tile.for`` that may be :class:`PendingMma` during the loop
    (position among the carried values -> the accumulator's numerics, and whether it is
    an exact accumulator): each is used once in the body, at its top level, as the
    accumulator of an ``mma`` (or of an ``add`` the compiler fuses into one, ``fused``),
    whose result is only yielded back to it. An exact ``mma`` is an ordinary one in
    ``fast`` mode."""
    block = loop.regions[0].block
    term = block.terminator
    uses: dict[Value, list[Instr]] = {}
    for instr in walk(block):
        for v in instr.operands:
            uses.setdefault(v, []).append(instr)
    top = set(block.instrs)
    found: dict[int, tuple[Num, bool]] = {}
    for k, arg in enumerate(block.args[1:]):
        users = uses.get(arg, [])
        if len(users) != 1 or users[0] not in top or term is None:
            continue
        user = users[0]
        if isinstance(user.op, Mma) and user.operands[2:] == [arg] \
                and arg not in user.operands[:2]:
            op = user.op
        elif user in fused and isinstance(fused[user].op, Mma) \
                and isinstance(user.op, Add) and user.operands.count(arg) == 1:
            op = fused[user].op
        else:
            continue
        out = user.results[0]
        if uses.get(out) == [term] and term.operands.count(out) == 1 \
                and term.operands[k] is out:
            assert isinstance(op, Mma)
            found[k] = (num(op.accum), op.exact and not fast)
    return found


__all__ = ["PendingMma", "deferrable", "forced"]
