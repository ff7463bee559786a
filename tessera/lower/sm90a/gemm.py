"""sm_90a matrix building blocks: wgmma descriptors, wgmma blocks and register staging
(the TMA copies that fill the operands are in :mod:`tessera.lower.sm90a.tma`).

Everything here emits Target IR through an :class:`~tessera.lower.emit.TargetEmitter` for one
CTA of 128 threads (one warpgroup, :mod:`tessera.lower.tiles`).

**Operand buffers.** A wgmma shared operand is a :class:`SharedBox` of ``rows x cols``
elements with a 32/64/128-byte swizzle, stored the way TMA writes it: in *panels* of
``span`` bytes along ``cols`` (one panel when ``cols * esize == span``); panel ``p``
holds columns ``[p*w, (p+1)*w)`` (``w = span / esize``) as a ``rows x w`` row-major block
at ``base + p * rows * span``, swizzled on absolute addresses (PTX ISA 8.x sec.
9.7.15.5.1.2 "Shared Memory Matrix Layout"). ``A`` is ``(BM, BK)`` and ``B^T`` is
``(BN, BK)``: K-major, K along ``cols``. ``B`` given as ``(BK, BN)`` is MN-major (N along
``cols``) and needs wgmma's transpose bit (16-bit types only). Buffers must be aligned to
``8 * span`` bytes so that the swizzle pattern starts at the buffer (base offset 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tessera.arch.descriptor import encode_descriptor
from tessera.arch.errors import AlignmentError
from tessera.arch.swizzle import Swizzle
from tessera.errors import ArgumentError, ShapeError, UnsupportedError
from tessera.ir.core import Value
from tessera.ir.dialects.target.async_ops import (
    INT_MMA,
    MMA_K,
    Fence,
    Wgmma,
    WgmmaCommit,
    WgmmaFence,
    WgmmaWait,
)
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm80.copy import Lanes, lin
from tessera.lower.sm80.gemm import quad_origin
from tessera.lower.tiles import THREADS, SharedBox, elem_size

#: the start-address field keeps address bits 4..17 (PTX ISA 'Matrix Descriptor Format')
_ADDR_MASK = 0x3FFFF
_LBO_UNUSED = 16  # K-major swizzled operands never use LBO; libraries store 1 (encoded)


@dataclass(frozen=True)
class BoxGeometry:
    """Static facts of a swizzled operand box: element bytes, swizzle span, panels."""

    esize: int
    span: int
    panels: int
    rows: int

    @property
    def panel_bytes(self) -> int:
        """Bytes of one ``rows x span`` panel."""
        return self.rows * self.span

    @property
    def width(self) -> int:
        """Elements per panel row."""
        return self.span // self.esize


def geometry(box: SharedBox) -> BoxGeometry:
    """Check that ``box`` is a wgmma-readable swizzled buffer and describe its panels."""
    esize = elem_size(box.elem)
    if esize > 2 and box.elem != "tf32":  # tf32: 4-byte elements, K-major only
        raise UnsupportedError(f"a wgmma shared operand holds 1- or 2-byte elements or "
                               f"tf32, not {box.elem}", hint="stage f32 data as bf16/f16 first")
    if box.swizzle not in (32, 64, 128):
        raise UnsupportedError(f"wgmma operands here need a 32/64/128-byte swizzle, got "
                               f"{box.swizzle}", hint="load the box with a swizzled tensor map")
    row_bytes = box.cols * esize
    if row_bytes % box.swizzle or box.rows % 8:
        raise ShapeError(f"a {box.rows}x{box.cols} {box.elem} box does not tile into "
                         f"{box.swizzle}-byte swizzle panels of 8-row groups",
                         hint=f"use cols a multiple of {box.swizzle // esize} and rows a "
                              "multiple of 8")
    atom = Swizzle(box.swizzle).atom_bytes
    if box.align % atom:
        raise AlignmentError(f"a {box.swizzle}-byte swizzled operand must be {atom}-byte "
                             f"aligned, the box is only {box.align}-byte aligned (PTX ISA "
                             "'Matrix Descriptor Format': the pattern starts on that boundary)",
                             hint=f"allocate it with align={atom}")
    return BoxGeometry(esize, box.swizzle, row_bytes // box.swizzle, box.rows)


def operand_offset(box: SharedBox, k: int, mn: int, *, k_major: bool) -> int:
    """Byte offset from ``box.base`` of the operand whose corner is element ``(mn, k)``.

    K-major (K along ``cols``): ``mn`` must be a multiple of 8 and ``k * esize`` of 16.
    MN-major (K along ``rows``): ``k`` a multiple of 8, ``mn`` of the panel width.
    """
    g = geometry(box)
    if k_major:
        kb = k * g.esize
        if mn % 8 or kb % 16 or not (0 <= mn < box.rows and 0 <= k < box.cols):
            raise ShapeError(f"K-major operand corner (mn={mn}, k={k}) is not on a core matrix")
        return (kb // g.span) * g.panel_bytes + kb % g.span + mn * g.span
    if k % 8 or mn % g.width or not (0 <= k < box.rows and 0 <= mn < box.cols):
        raise ShapeError(f"MN-major operand corner (mn={mn}, k={k}) is not on a swizzle atom")
    return k * g.span + (mn // g.width) * g.panel_bytes


def descriptor_fields(box: SharedBox, *, k_major: bool) -> tuple[int, int]:
    """``(leading byte offset, stride byte offset)`` of the canonical layouts (PTX ISA sec.
    9.7.15.5.1.2; CUTLASS ``make_gmma_desc``): SBO is the 8-row (K-major) or 8-k (MN-major)
    group stride ``8 * span``; LBO is the MN panel stride of an MN-major operand."""
    g = geometry(box)
    return (_LBO_UNUSED if k_major else g.panel_bytes), 8 * g.span


def make_descriptor(e: TargetEmitter, box: SharedBox, k: int = 0, mn: int = 0, *,
                    k_major: bool = True) -> Value:
    """The ``u64`` wgmma matrix descriptor of the operand at element ``(mn, k)`` of ``box``:
    ``((addr & 0x3FFFF) >> 4) | LBO>>4 << 16 | SBO>>4 << 32 | layout << 62`` computed from
    the box's ``u32`` address (the static fields are one immediate)."""
    lbo, sbo = descriptor_fields(box, k_major=k_major)
    static = encode_descriptor(0, lbo, sbo, Swizzle(box.swizzle))
    addr = box.base
    off = operand_offset(box, k, mn, k_major=k_major)
    if off:
        addr = e.add(addr, e.const(off, "u32"), "u32")
    field = e.bin("shr", e.bin("and", addr, e.const(_ADDR_MASK, "u32"), "u32"),
                  e.const(4, "u32"), "u32")
    # the start field ends at bit 13, so adding the static fields cannot carry into them
    return e.add(e.cvt(field, "u64", "u32"), e.const(static, "u64"), "u64")


def advance_descriptor(e: TargetEmitter, desc: Value, nbytes: int) -> Value:
    """``desc`` with its start address moved by ``nbytes`` (a multiple of 16): the k-step
    rule, e.g. +32 bytes (+2 encoded) per k16 step inside a 128B atom."""
    if nbytes % 16:
        raise ArgumentError(f"a descriptor moves in 16-byte units, not {nbytes} bytes")
    return desc if nbytes == 0 else e.add(desc, e.const(nbytes >> 4, "u64"), "u64")


# ----------------------------------------------------------------------------- wgmma
def _check_acc(acc: Sequence[Value], bm: int, bn: int) -> None:
    if bm % 64 or bn % 8 or not 8 <= bn <= 256:
        raise ShapeError(f"a {bm}x{bn} accumulator is not m64nN blocks",
                         hint="BM a multiple of 64, BN a multiple of 8 up to 256")
    if len(acc) != bm * bn // THREADS:
        raise ShapeError(f"a {bm}x{bn} accumulator holds {bm * bn // THREADS} values per "
                         f"thread, got {len(acc)}")


def wgmma_block(e: TargetEmitter, acc: Sequence[Value], a: SharedBox, b: SharedBox, *,
                b_trans: bool, atype: str = "bf16", scale_d: Value | None = None,
                ) -> list[Value]:
    """``acc += A @ B`` over the whole K of ``a`` with ``wgmma.mma_async``; returns the
    new accumulators in :func:`~tessera.lower.tiles.acc_coords` order.

    ``a`` is ``(BM, BK)`` K-major; ``b`` is ``B^T`` ``(BN, BK)`` K-major when ``b_trans``,
    else ``B`` ``(BK, BN)`` MN-major. ``scale_d`` (a predicate) is wgmma's scale-d for
    the first k-step: false makes it overwrite the accumulator, so it need not be zeroed.
    Emits ``wgmma.fence``, one ``wgmma`` per k-step and 64-row block, ``commit_group`` and
    ``wait_group 0`` (PTX ISA sec. 9.7.15.6)."""
    bm, bk = a.rows, a.cols
    bn = b.rows if b_trans else b.cols
    if (b.cols if b_trans else b.rows) != bk:
        raise ShapeError(f"A is {bm}x{bk} but B{'^T' if b_trans else ''} is "
                         f"{b.rows}x{b.cols}: the K extents differ")
    if a.elem != atype or atype not in MMA_K:
        raise UnsupportedError(f"wgmma A type {atype!r} with a {a.elem} box")
    if not b_trans and elem_size(b.elem) != 2:
        raise UnsupportedError("an MN-major (row-major K x N) B needs 16-bit elements "
                               "(PTX ISA sec. 9.7.15.5: imm-trans-b is for .f16/.bf16)",
                               hint="store 8-bit B as N x K and pass b_trans=True")
    _check_acc(acc, bm, bn)
    ks = MMA_K[atype]
    if bk % ks:
        raise ShapeError(f"BK={bk} is not a multiple of the wgmma k{ks}")
    half = bn // 2
    da = make_descriptor(e, a)
    db = make_descriptor(e, b, k_major=b_trans)
    ctype = "s32" if atype in INT_MMA else "f32"  # byte integers accumulate in s32
    blocks = [e.pack(list(acc[i * half:(i + 1) * half]), ctype) for i in range(bm // 64)]
    # the packs above touch the accumulators: the fence orders them before the wgmma
    e.op(WgmmaFence())
    on = e.const(1, "pred")
    op = Wgmma(bn, atype, b.elem, 0, 0 if b_trans else 1, ctype)
    for step in range(bk // ks):
        k = step * ks
        db_k = advance_descriptor(e, db, operand_offset(b, k, 0, k_major=b_trans))
        p = scale_d if step == 0 and scale_d is not None else on
        for i in range(bm // 64):
            da_k = advance_descriptor(e, da, operand_offset(a, k, 64 * i, k_major=True))
            blocks[i] = e.one(op, blocks[i], da_k, db_k, p)
    e.op(WgmmaCommit())
    e.op(WgmmaWait(0))
    return [v for blk in blocks for v in e.unpack(blk, ctype, half)]


def stage_regs_to_shared(e: TargetEmitter, values: Sequence[Value], bm: int, bn: int,
                         dst: SharedBox) -> None:
    """Write a ``(bm, bn)`` f32 tile held in the accumulator layout into ``dst`` as
    ``dst.elem`` (bf16/f16, rounded to nearest even), in the panel + swizzle layout a
    following wgmma reads as a K-major A operand; then ``fence.proxy.async`` and
    ``bar.sync`` so the async proxy sees the generic-proxy stores (PTX ISA sec. 9.7.13.4)."""
    _check_acc(values, bm, bn)
    if (dst.rows, dst.cols) != (bm, bn) or dst.elem not in ("bf16", "f16"):
        raise ShapeError(f"staging a {bm}x{bn} tile needs a {bm}x{bn} bf16/f16 box, got "
                         f"{dst.rows}x{dst.cols} {dst.elem}")
    g = geometry(dst)
    lanes = Lanes(e)
    row, col = quad_origin(e, lanes)
    gq = lanes.bits(2, 7)  # lane // 4, which is row & 7
    # row & 7: the 128-byte-row index bits the swizzle XORs into the chunk index
    shift = {128: 0, 64: 1, 32: 2}[g.span]
    mask = (g.span // 16) - 1
    x = e.bin("shl", e.bin("and", e.bin("shr", gq, e.const(shift, "u32"), "u32"),
                           e.const(mask, "u32"), "u32"), e.const(4, "u32"), "u32")
    t_off = lin(e, [(row, g.span), (col, g.esize)])
    t_addr = e.add(dst.base, t_off, "u32")
    chunk_addr = [e.add(t_addr, e.bin("xor", e.const(16 * c, "u32"), x, "u32"), "u32")
                  for c in range(g.span // 16)]
    half = bn // 2
    for r in range(0, len(values), 2):
        blk, i = divmod(r, half)
        h, j = (i >> 1) & 1, i >> 2  # register pair (i, i+1): row +8h, columns 8j + 2q
        col_bytes = 8 * j * g.esize
        static = (col_bytes // g.span) * g.panel_bytes + (64 * blk + 8 * h) * g.span
        lo, hi = (e.cvt(v, dst.elem, "f32", "rn") for v in values[r:r + 2])
        e.st("shared", chunk_addr[(col_bytes % g.span) // 16], e.pack([lo, hi], "b32"),
             "b32", offset=static)
    e.op(Fence("proxy_async"))
    e.bar()


__all__ = ["BoxGeometry", "advance_descriptor", "descriptor_fields", "geometry",
           "make_descriptor", "operand_offset", "stage_regs_to_shared",
           "wgmma_block"]
