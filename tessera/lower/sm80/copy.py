"""Shared-memory addressing, thread-index pieces and ``cp.async`` tile copies, for both
targets.

A :class:`~tessera.lower.tiles.SharedBox` with ``swizzle`` ``S`` (32, 64 or 128) stores
the byte at row-major *offset* ``o`` of the buffer at :func:`swizzle_offset` ``(o, S)``
``= o ^ (((o >> 7) & (S / 16 - 1)) << 4)``: the 16-byte chunk index inside each
128-byte segment (bits 4..6) is XORed with the segment index (bits 7..9). For 128-byte
rows and ``S = 128`` that is chunk ``XOR (row % 8)``, so the eight row addresses of an
``ldmatrix`` fall in eight different bank groups. Taken on offsets inside the buffer,
writers and readers agree whatever the buffer's alignment; on a buffer aligned to 1024
bytes it equals the absolute-address swizzle of TMA and ``wgmma``
(:mod:`tessera.arch.swizzle`), so ``cp.async`` can fill ``wgmma`` operands too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import gcd

from tessera.errors import Loc, ShapeError, UnsupportedError
from tessera.ir.core import Value
from tessera.ir.dialects.target.async_ops import CpAsync, CpAsyncCommit, CpAsyncWait
from tessera.lower.emit import TargetEmitter
from tessera.lower.tiles import THREADS, GlobalBox, SharedBox, elem_size


def _check_swizzle(swizzle: int) -> None:
    """Refuse a swizzle span other than 0 (none), 32, 64 or 128 bytes."""
    if swizzle not in (0, 32, 64, 128):
        raise UnsupportedError(f"unknown shared-memory swizzle {swizzle}",
                               hint="use 0, 32, 64 or 128")


def swizzle_offset(offset: int, swizzle: int) -> int:
    """Where byte ``offset`` of a row-major shared buffer lives under ``swizzle``
    (0, 32, 64 or 128): ``offset ^ (((offset >> 7) & (swizzle / 16 - 1)) << 4)``."""
    _check_swizzle(swizzle)
    return offset ^ (((offset >> 7) & (swizzle // 16 - 1)) << 4) if swizzle else offset


def emit_swizzle(e: TargetEmitter, offset: Value, swizzle: int) -> Value:
    """:func:`swizzle_offset` of a ``u32`` byte offset, as instructions."""
    seg = e.bin("and", e.bin("shr", offset, e.const(7, "u32"), "u32"),
                e.const(swizzle // 16 - 1, "u32"), "u32")
    return e.bin("xor", offset, e.bin("shl", seg, e.const(4, "u32"), "u32"), "u32")


class SharedAddresses:
    """Addresses into one shared box: ``base + swizzle(dynamic + static)``, reusing
    the swizzled dynamic part when the static part only moves bits above 9 (whole
    1024-byte swizzle atoms, which the XOR leaves alone)."""

    def __init__(self, e: TargetEmitter, box: SharedBox) -> None:
        _check_swizzle(box.swizzle)
        self.e, self.box = e, box
        self._cache: dict[tuple[Value, int], Value] = {}

    def addr(self, dynamic: Value, static: int) -> Value:
        e, u32 = self.e, "u32"
        atoms, low = divmod(static, 1024) if self.box.swizzle else (0, static)
        key = (dynamic, low)
        if key not in self._cache:
            off = e.add(dynamic, e.const(low, u32), u32) if low else dynamic
            if self.box.swizzle:
                off = emit_swizzle(e, off, self.box.swizzle)
            self._cache[key] = e.add(self.box.base, off, u32)
        addr = self._cache[key]
        return e.add(addr, e.const(1024 * atoms, u32), u32) if atoms else addr


def u32op(e: TargetEmitter, a: Value, op: str, k: int) -> Value:
    return e.bin(op, a, e.const(k, "u32"), "u32")


def lin(e: TargetEmitter, terms: Sequence[tuple[Value, int]]) -> Value:
    """``sum(value * scale)`` in ``u32`` (scales are powers of two or small constants)."""
    out: Value | None = None
    for v, scale in terms:
        if scale == 0:
            continue
        t = v if scale == 1 else (u32op(e, v, "shl", scale.bit_length() - 1)
                                  if scale & (scale - 1) == 0 else u32op(e, v, "mul", scale))
        out = t if out is None else e.add(out, t, "u32")
    return out if out is not None else e.const(0, "u32")


class Lanes:
    """Pieces of this thread's index in a CTA of 128 threads (warp, lane bits), each
    computed once for the sequence being emitted."""

    def __init__(self, e: TargetEmitter) -> None:
        self.e = e
        self.tid = e.sreg("tid.x")
        self._bits: dict[tuple[int, int], Value] = {}

    def bits(self, shift: int, mask: int) -> Value:
        """``(tid >> shift) & mask``."""
        if (shift, mask) not in self._bits:
            v = u32op(self.e, self.tid, "shr", shift) if shift else self.tid
            self._bits[shift, mask] = u32op(self.e, v, "and", mask) if mask else v
        return self._bits[shift, mask]

    @property
    def warp(self) -> Value:
        return self.bits(5, 0)  # 128 threads: tid >> 5 is 0..3


# ------------------------------------------------------------------------- copies
def copy_async(e: TargetEmitter, dst: SharedBox, src: GlobalBox, *, chunk: int = 16,
               commit: bool = True) -> None:
    """Copy global box ``src`` into shared box ``dst`` with ``cp.async`` and commit
    the group (PTX ISA sec. 9.7.9.25; ``commit=False`` leaves the group open so that
    the next copy joins it). The box is cut into chunks of ``chunk`` bytes: 16
    (``cp.async.cg``) or, where the caller cannot promise 16-byte aligned rows and
    start, 8 or 4 (``cp.async.ca``); chunk ``c`` of the row-major box lands at shared
    offset :func:`swizzle_offset` ``(c * chunk)`` (dense rows of ``cols`` elements) and
    thread ``t`` copies chunks ``t, t + 128, ...``. Read the data only after
    :func:`wait_async`."""
    if (dst.rows, dst.cols, dst.elem) != (src.rows, src.cols, src.elem):
        raise ShapeError(f"cp.async copies a {src.rows}x{src.cols} {src.elem} box into a "
                         f"{dst.rows}x{dst.cols} {dst.elem} buffer",
                         hint="give both boxes one shape and element type")
    if chunk not in (4, 8, 16):
        raise UnsupportedError(f"cp.async copies 4, 8 or 16 bytes, not {chunk}")
    esize = elem_size(src.elem)
    row_bytes, stride_bytes = src.cols * esize, src.stride * esize
    if row_bytes % chunk or stride_bytes % chunk:
        raise UnsupportedError(f"cp.async of {chunk}-byte chunks needs rows and a row stride "
                               f"in multiples of {chunk} bytes, got {row_bytes} and "
                               f"{stride_bytes}", hint="pad the tensor's rows")
    per_row, total = row_bytes // chunk, src.rows * row_bytes // chunk
    op = CpAsync(16, "cg") if chunk == 16 else CpAsync(chunk, "ca")
    tid = e.sreg("tid.x")
    shared = SharedAddresses(e, dst)
    s_off = u32op(e, tid, "shl", chunk.bit_length() - 1)
    static_rows = THREADS % per_row == 0 or per_row % THREADS == 0
    if static_rows:  # row and column of chunk tid + 128 k are (tid-part) + (static part)
        row0, col0 = ((u32op(e, tid, "shr", per_row.bit_length() - 1),
                       u32op(e, tid, "and", per_row - 1)) if THREADS % per_row == 0
                      else (e.const(0, "u32"), tid))
        g_thread = _global(e, src.base, row0, col0, stride_bytes, chunk)
    for k in range(-(-total // THREADS)):
        first = k * THREADS
        if static_rows:
            row, col = divmod(first, per_row)
            rel = row * stride_bytes + col * chunk
            g_addr = e.add(g_thread, e.const(rel, "u64"), "u64") if rel else g_thread
        else:  # rows of an odd number of chunks: divide per chunk
            c = u32op(e, tid, "add", first)
            g_addr = _global(e, src.base, u32op(e, c, "div", per_row),
                             u32op(e, c, "rem", per_row), stride_bytes, chunk)
        s_addr = shared.addr(s_off, first * chunk)
        if first + THREADS <= total:
            e.op(op, [s_addr, g_addr])
        else:  # the last round: only the threads that still own a chunk copy
            live = e.setp("lt", tid, e.const(total - first, "u32"), "u32")
            e.if_(live, _issue(op, s_addr, g_addr))
    if commit:
        e.op(CpAsyncCommit())


def copy_chunk(align: int, g: GlobalBox, loc: Loc) -> int:
    """The widest ``cp.async`` chunk, 16, 8 or 4 bytes, that divides ``align`` (what the
    box's start address is sure to be a multiple of, :mod:`tessera.lower.multiples`),
    its row length and its row stride, so that every chunk's address is aligned to its
    size; the error for a copy no chunk fits is reported at ``loc``."""
    esize = elem_size(g.elem)
    span = gcd(align, g.cols * esize, g.stride * esize)
    for chunk in (16, 8, 4):
        if span % chunk == 0:
            return chunk
    raise UnsupportedError(
        f"cp.async copies chunks of 4, 8 or 16 bytes at addresses aligned to their size; "
        f"this {g.rows}x{g.cols} {g.elem} view's start, row length and row stride are only "
        f"known to be multiples of {span} bytes", loc=loc,
        hint="start the copy at a column whose byte offset is a multiple of 4 (of 16 for "
             "the fastest copy), or read the view with a plain load")


def copy_elements(e: TargetEmitter, dst: SharedBox, src: GlobalBox) -> None:
    """Copy global box ``src`` into the unswizzled shared box ``dst`` one element at a
    time with plain loads and stores (thread ``t`` copies elements ``t, t + 128, ...``):
    the copy of a view of 1- or 2-byte elements whose rows are not 4-byte aligned, which
    ``cp.async`` cannot copy. Synchronous: the data is the CTA's after the next barrier."""
    if dst.swizzle or (dst.rows, dst.cols, dst.elem) != (src.rows, src.cols, src.elem):
        raise UnsupportedError("element copies take an unswizzled shared box of the "
                               "source's shape")
    esize = elem_size(src.elem)
    mt = {1: "b8", 2: "b16", 4: "u32"}[esize]
    total, stride_bytes = src.rows * src.cols, src.stride * esize
    tid = e.sreg("tid.x")

    def one(inner: TargetEmitter, c: Value) -> None:
        g_addr = _global(inner, src.base, u32op(inner, c, "div", src.cols),
                         u32op(inner, c, "rem", src.cols), stride_bytes, esize)
        s_addr = inner.add(dst.base, u32op(inner, c, "mul", esize), "u32")
        inner.st("shared", s_addr, inner.ld("global", g_addr, mt), mt)

    for k in range(-(-total // THREADS)):
        c = u32op(e, tid, "add", k * THREADS) if k else tid
        if (k + 1) * THREADS <= total:
            one(e, c)
        else:  # the last round: only the threads that still own an element copy
            live = e.setp("lt", c, e.const(total, "u32"), "u32")
            e.if_(live, lambda inner, c=c: one(inner, c))  # type: ignore[misc]


def _issue(op: CpAsync, s_addr: Value, g_addr: Value) -> Callable[[TargetEmitter], None]:
    def body(inner: TargetEmitter) -> None:
        inner.op(op, [s_addr, g_addr])
    return body


def _global(e: TargetEmitter, base: Value, row: Value, col: Value, stride_bytes: int,
            chunk: int) -> Value:
    """``base + row * stride_bytes + col * chunk`` as a ``u64`` address."""
    off = e.bin("mul", row, e.const(stride_bytes, "u32"), "u32", "wide")
    col_bytes = e.cvt(lin(e, [(col, chunk)]), "u64", "u32")
    return e.add(base, e.add(off, col_bytes, "u64"), "u64")


def wait_async(e: TargetEmitter, n: int = 0) -> None:
    """``cp.async.wait_group n`` then ``bar.sync 0``: a thread's wait covers only its own
    copies (sec. 9.7.9.25), so the barrier makes every thread's chunks visible to all."""
    e.op(CpAsyncWait(n))
    e.bar()


__all__ = ["Lanes", "SharedAddresses", "copy_async", "copy_chunk", "copy_elements",
           "emit_swizzle", "lin",
           "swizzle_offset", "u32op", "wait_async"]
