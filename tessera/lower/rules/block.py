"""Lowering rules for block kernels: tensors spread over a CTA of 128 threads.

A ``tile.load`` of a tensor is *deferred*: it stays a memory view until a consumer
decides how to read it. ``tile.mma`` reads its shared operands straight from shared
memory (``ldmatrix`` + ``mma.sync`` on sm_80, matrix descriptors + ``wgmma`` on sm_90a;
an A operand in registers, the ``P`` of ``P @ V``, is an earlier product) and
accumulates in the accumulator layout. ``tile.cp_async`` copies a global box into a
shared buffer with TMA (sm_90a ``wgmma`` buffers, :mod:`tessera.lower.sm90a.mma`) or
``cp.async`` (all threads; 16-byte chunks, or 8- or 4-byte ones when the view's start,
a row or the row stride is not known to be a multiple of 16 bytes, see
:func:`tessera.lower.sm80.copy.copy_chunk`), in the tile program's commit groups. A store
writes a register tensor (accumulator or blocked layout) to its elements.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import Any

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr
from tessera.ir.dialects.target.async_ops import INT_MMA, CpAsyncCommit, CpAsyncWait, Fence
from tessera.ir.dialects.target.ops import Bar
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer, rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.layout import Acc, BRow
from tessera.lower.rules.memory import address
from tessera.lower.tiles import THREADS, GlobalBox, SharedBox, elem_size
from tessera.lower.values import (
    Dist,
    Lowered,
    Mem,
    elem_bytes,
    mem_type,
    ptx_elem,
    reg_type,
    storage_name,
)
from tessera.numerics import storage_of


def commit_all(low: Lowerer, e: TargetEmitter, *, force: bool, fence: bool = True) -> None:
    """Close the copy group being formed, in both mechanisms at once (``cp.async``
    groups and the TMA group ring), so that their group counts stay in step and
    ``wait_group n`` means the same for both; without ``force`` only when a copy is
    uncommitted (a wait or barrier commits first, as in Tile IR). ``fence``: see
    :func:`tessera.lower.sm90a.mma.tma_commit`."""
    if not (force or low.extra.get("uncommitted") or low.extra.get("tma_bytes")):
        return
    e.op(CpAsyncCommit())
    low.extra["uncommitted"] = False
    if "tma" in low.extra:
        from tessera.lower.sm90a.mma import tma_commit

        tma_commit(low, e, fence=fence)


def wait_all(low: Lowerer, e: TargetEmitter, n: int) -> None:
    """Both mechanisms wait until at most ``n`` groups are pending; shared memory the
    copies (or the bookkeeping) wrote is then fenced for the async proxy."""
    commit_all(low, e, force=False, fence=False)
    e.op(CpAsyncWait(n))
    if "tma" in low.extra:
        from tessera.lower.sm90a.mma import tma_wait

        tma_wait(low, e, n)
    _proxy_fence(low, e)
    if n == 0:
        low.extra["async_pending"] = False


def finish_async(low: Lowerer, e: TargetEmitter) -> None:
    """Complete the CTA's pending async copies (before a barrier)."""
    if low.extra.get("async_pending") or "tma" in low.extra:
        wait_all(low, e, 0)


def _proxy_fence(low: Lowerer, e: TargetEmitter) -> None:
    # cp.async writes through the generic proxy; wgmma reads through the async proxy
    if low.target == "sm_90a" and low.extra.get("wgmma_buffers"):
        e.op(Fence("proxy_async"))


def _squeezed(mem: Mem) -> Mem:
    """A view of rank > 2 whose leading axes are all 1 as its last two axes (the
    ``1 x R x C`` boxes of a 3-D tensor's one batch)."""
    if len(mem.shape) > 2 and all(d == 1 for d in mem.shape[:-2]):
        return replace(mem, shape=mem.shape[-2:], strides=mem.strides[-2:])
    return mem


def shared_box(mem: Mem) -> SharedBox:
    """A shared view as the box the matrix building blocks read."""
    mem = _squeezed(mem)
    if mem.space != "shared" or mem.offset is not None or len(mem.shape) != 2:
        raise UnsupportedError("mma operands must be whole 2-D shared buffers here",
                               hint="copy the tile into shared memory with "
                                    "ts.tile.cp_async first")
    rows, cols = (mem.shape[1], mem.shape[0]) if mem.transposed else mem.shape
    align = 8 * mem.swizzle if mem.meta.get("wgmma") else 128 if mem.swizzle else 16
    return SharedBox(mem.base, rows, cols, ptx_elem(mem.element), mem.swizzle, align=align)


def global_box(e: TargetEmitter, mem: Mem) -> GlobalBox:
    mem = _squeezed(mem)
    if mem.space != "global" or len(mem.shape) != 2 or mem.strides[-1] != 1:
        raise UnsupportedError("async copies take row-major 2-D global views")
    return GlobalBox(address(e, mem), mem.shape[0], mem.shape[1], mem.strides[0],
                     ptx_elem(mem.element))


def load_tile(low: Lowerer, instr: Instr, mem: Mem) -> Lowered:
    """A deferred load: the view itself, read by its consumer."""
    return replace(mem, meta={**mem.meta, "loaded": True})


@rule(tile_compute.Transpose)
def _transpose(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    (x,) = args
    from tessera.lower.rules.stage import stage, transposed

    if isinstance(x, Dist):  # a register tile: staged through shared memory
        x = stage(low, x, instr)
    if not isinstance(x, Mem):
        raise UnsupportedError("transposes of register tiles are not lowered",
                               loc=instr.loc)
    return [transposed(x)]


@rule(tile_compute.Full)
def _full(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_compute.Full)
    from tessera.lower.rules.tensor import register_count

    layout = low.layouts[instr.results[0]]
    t = reg_type(op.element)
    n = register_count(layout)
    if t == "f32":
        from tessera.lower.rules.scalar import constant_value

        value = constant_value(float(op.value), op.element)
    else:
        value = op.value
    return [Dist(layout, [low.em.const(value, t)] * n, t)]


@rule(tile_memory.CpAsync)
def _cp_async(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    dst, src = args
    assert isinstance(dst, Mem) and isinstance(src, Mem)
    e = low.em
    _war_barrier(low, e)
    from tessera.lower.sm80.copy import copy_async, copy_chunk

    box = shared_box(dst)
    if dst.meta.get("wgmma"):
        from tessera.lower.sm90a.mma import tma_copy

        tma_copy(low, dst, src, box)
        return []
    g = global_box(e, src)
    try:
        chunk = copy_chunk(src.align, g, instr.loc)
    except UnsupportedError:
        # rows of bytes not 4-byte aligned, read by products summed per thread (no
        # tensor-core fragments, no swizzle): copied element by element instead
        if not low.extra.get("per_thread_mma") or box.swizzle:
            raise
        from tessera.lower.sm80.copy import copy_elements

        copy_elements(e, box, g)
        return []
    # the Tile IR groups copies with cp_commit_group (or a wait / barrier), not per copy
    copy_async(e, box, g, chunk=chunk, commit=False)
    low.extra["async_pending"] = low.extra["uncommitted"] = True
    return []


def _war_barrier(low: Lowerer, e: TargetEmitter) -> None:
    """A tile is a whole CTA, so a copy may overwrite shared memory that other warps are
    still reading (ldmatrix, wgmma, ld.shared) for the tile's previous step; the tile
    program needs no barrier there, the CTA does. One ``bar.sync`` goes before each run
    of copies unless one was just emitted."""
    if not low.block_kernel:  # a scalar kernel's tiles are threads: the tile program syncs
        return
    last = e.block.instrs[-1].op if e.block.instrs else None
    if low.extra.get("prev_op") is not tile_memory.CpAsync and not isinstance(last, Bar):
        e.bar()


@rule(tile_memory.CpCommitGroup)
def _commit(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    commit_all(low, low.em, force=True)
    return []


@rule(tile_memory.CpWaitGroup)
def _wait(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    op = instr.op
    assert isinstance(op, tile_memory.CpWaitGroup)
    # every thread waits for its own copies; the barrier makes the CTA's copies visible
    wait_all(low, low.em, op.n)
    low.em.bar()
    return []


@rule(tile_compute.Mma)
def _mma(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
    a, b = args[0], args[1]
    layout = low.layouts[instr.results[0]]
    if not isinstance(layout, Acc):  # an integer mma: per-thread sums
        from tessera.lower.exact.intmma import integer_mma

        return integer_mma(low, instr, args)
    _check_types(instr)
    # byte integers accumulate in s32 (tessera.lower.sm80.intmma proved their sums fit)
    elem = instr.operands[0].type.element  # type: ignore[attr-defined]
    ctype = "s32" if ptx_elem(elem) in INT_MMA else "f32"
    if len(args) == 3:
        acc = args[2]
        assert isinstance(acc, Dist)
        regs = list(acc.regs)
    else:
        zero = low.em.const(0 if ctype == "s32" else 0.0, ctype)
        regs = [zero] * (layout.rows * layout.cols // THREADS)
    if not isinstance(b, Mem):
        raise UnsupportedError("the B operand of mma must be read from shared memory",
                               hint="copy it into shared memory with ts.tile.cp_async",
                               loc=instr.loc)
    bbox = shared_box(b)
    if isinstance(a, Dist):  # a register tile: P of P @ V
        return [Dist(layout, _mma_regs(low, instr, a, bbox, b.transposed, regs), "f32")]
    assert isinstance(a, Mem)
    abox = shared_box(a)
    if low.target == "sm_90a":
        from tessera.lower.sm90a.mma import wgmma_smem

        out = wgmma_smem(low, abox, bbox, a.transposed, b.transposed, regs)
    else:
        from tessera.lower.sm80.gemm import mma_block

        _sm80_family_types(low, abox.elem, instr)
        out = mma_block(low.em, regs, abox, bbox, a_trans=a.transposed, b_trans=b.transposed,
                        atype=abox.elem)
    return [Dist(layout, out, ctype)]


def _sm80_family_types(low: Lowerer, elem: str, instr: Instr) -> None:
    """fp8 products: ``mma.sync`` m16n8k32 e4m3/e5m2 exists from sm_89 on (PTX ISA,
    "Warp-level matrix multiply-accumulate instructions"), not on sm_80 or sm_86."""
    if elem in ("e4m3", "e5m2") and low.target != "sm_89":
        raise UnsupportedError(f"an fp8 ({elem}) mma is not lowered for {low.target}: "
                               f"{low.target} has no fp8 tensor-core product",
                               hint="compile for sm_89 (mma.sync m16n8k32) or sm_90a "
                                    "(wgmma), or cast the operands to bf16", loc=instr.loc)


def _check_types(instr: Instr) -> None:
    """Both operands of one tensor-core format (the instructions take no mixed pairs)."""
    a, b = (t.element for t in (instr.operands[0].type, instr.operands[1].type))  # type: ignore
    if ptx_elem(a) != ptx_elem(b) or ptx_elem(a) not in ("bf16", "f16", "e4m3", "e5m2",
                                                          *INT_MMA):
        why = _WHY_NOT_MMA.get(storage_of(a).name if a == b else "", "") or \
            _WHY_NOT_MMA.get(storage_name(a) if a == b else "", "")
        raise UnsupportedError(f"tensor-core mma of {a} x {b} is not lowered" + why,
                               hint="cast both operands to bf16 (or f16, fp8) first",
                               loc=instr.loc)


#: why an mma of two tiles of one format has no tensor-core lowering
_WHY_NOT_MMA = {
    "float32": ": an mma of f32 tiles multiplies the exact f32 values, and tf32 tensor "
               "cores (mma.sync .tf32, inputs rounded to 10 mantissa bits by "
               "cvt.rna.tf32.f32) would give other bits",
    # a tf32 tensor is f32 storage whose values nothing rounds to tf32 on the way in
    "tf32": ": tf32 tiles hold f32 storage that is not rounded to tf32 (an argument keeps "
            "its f32 bits), and the tile mma multiplies those exact values; tensor cores "
            "(mma.sync m16n8k8 / wgmma .tf32) read only a tf32 value's 19 bits",
}


def _mma_regs(low: Lowerer, instr: Instr, a: Dist, b: SharedBox, b_trans: bool,
              regs: list[Any]) -> list[Any]:
    if not isinstance(a.layout, Acc):
        raise UnsupportedError("a register mma operand must come from an mma result",
                               loc=instr.loc)
    if low.target == "sm_90a":
        from tessera.lower.sm90a.mma import wgmma_regs

        return wgmma_regs(low, a, b, b_trans, regs)
    from tessera.lower.sm80.gemm import acc_to_a, mma_block_regs

    frags = acc_to_a(low.em, a.regs, a.layout.rows, a.layout.cols, b.elem)
    return mma_block_regs(low.em, regs, frags, b, b_trans=b_trans, atype=b.elem)


def store_tile(low: Lowerer, instr: Instr, mem: Mem, value: Lowered) -> None:
    """Store a register tensor into a view (the ``tile.store`` of a tensor)."""
    store_value(low, mem, value, low.layouts.get(instr.operands[1]))


def store_value(low: Lowerer, mem: Mem, value: Lowered, layout: Any) -> None:
    """Store a register tensor (accumulator or blocked layout) into a global view."""
    from tessera.lower.layout import Blocked
    from tessera.lower.rules.tensor import materialize, store_blocked

    value = materialize(low, value, layout)
    if isinstance(value, Dist) and isinstance(value.layout, Blocked):
        store_blocked(low, mem, value)
        return
    if isinstance(value, Dist) and isinstance(value.layout, BRow):
        store_rows(low, mem, value)
        return
    if not (isinstance(value, Dist) and isinstance(value.layout, Acc)):
        raise UnsupportedError("this tile cannot be stored yet", loc=low.em.loc)
    if mem.space != "global" or mem.strides[-1] != 1:
        _store_acc_elements(low, _squeezed(mem), value)
        return
    from tessera.lower.sm80.gemm import store_acc

    e, elem = low.em, ptx_elem(mem.element)
    pair = 2 * elem_size(elem)  # a column pair is one vector store where it is aligned
    store_acc(e, value.regs, address(e, mem), mem.strides[0], value.layout.rows,
              value.layout.cols, elem, pairs=mem.align % pair == 0)


def _store_acc_elements(low: Lowerer, mem: Mem, value: Dist) -> None:
    """An accumulator-layout tile stored one element at a time into any 2-D view (a
    shared buffer: a masked operand tile whose mask an accumulator's epilogue shares)."""
    from tessera.lower.rules.memory import to_mem
    from tessera.lower.sm80.gemm import acc_rowcol

    layout = value.layout
    assert isinstance(layout, Acc)
    if len(mem.shape) != 2:
        raise UnsupportedError("accumulators are stored to 2-D views", loc=low.em.loc)
    e, mt = low.em, mem_type(mem.element)
    s0, s1 = (e.const(s, "s32") for s in mem.strides)
    for reg, (row, col) in zip(value.regs, acc_rowcol(e, layout.rows, layout.cols)):
        off = e.add(e.mul(row, s0, "s32"), e.mul(col, s1, "s32"), "s32")
        e.st(mem.space, address(e, mem, off), to_mem(e, reg, value.type, mt, mem.element), mt)


def store_rows(low: Lowerer, mem: Mem, value: Dist) -> None:
    """Store row statistics (``BRow``): the register of each row's first chunk."""
    from tessera.lower.rules.masked import _offset, elements
    from tessera.lower.rules.memory import to_mem

    els, e = elements(low, value.layout), low.em
    mt = mem_type(mem.element)
    for r in range(els.count):
        addr = address(e, mem, _offset(e, mem, els.coords(r)))
        data = to_mem(e, value.regs[r], value.type, mt, mem.element)
        e.if_(els.inside(r), lambda inner, a=addr, d=data: inner.st(  # type: ignore[misc]
            mem.space, a, d, mt))


def store_result_tile(low: Lowerer, value: Lowered) -> None:
    """A returned tile, written at the tile's output position of ``out``: ``g_k * t_k``
    along the first grid-many axes, at the batch index (docs/decisions.md, "Tile model")."""
    from tessera.lower.rules.scalar import _ids  # noqa: F401  (grid coordinates)

    assert isinstance(value, Dist)
    fn, e, g = low.fn, low.em, low.geom
    assert g is not None
    shape = [int(d) for d in fn.attrs["result_shape"]]
    batched = bool(fn.attrs.get("result_batched"))
    body = shape[1:] if batched else shape
    strides = tuple(prod(body[i + 1:]) for i in range(len(body)))
    base = low.extra["out"]
    if batched:
        slice_bytes = prod(body) * elem_bytes(fn.attrs["result_element"])
        b = e.cvt(e.sreg("ctaid.y"), "u64", "u32")
        base = e.add(base, e.mul(b, e.const(slice_bytes, "u64"), "u64"), "u64")
    tile_shape = _tile_shape(value)
    off = None
    group = low.group_id(e)
    inner = prod(g.grid)
    for axis, n in enumerate(g.grid[:len(body)]):
        inner //= n
        coord = e.bin("rem", e.bin("div", group, e.const(inner, "s32"), "s32"),
                      e.const(n, "s32"), "s32")
        term = e.mul(coord, e.const(tile_shape[axis] * strides[axis], "s32"), "s32")
        off = term if off is None else e.add(off, term, "s32")
    mem = Mem("global", base, off, tuple(tile_shape), strides, fn.attrs["result_element"])
    store_value(low, mem, value, value.layout)


def _tile_shape(value: Dist) -> tuple[int, ...]:
    layout = value.layout
    return (layout.rows, layout.cols) if isinstance(layout, Acc) else layout.shape


__all__ = ["commit_all", "finish_async", "global_box", "load_tile", "shared_box",
           "store_result_tile", "store_tile", "wait_all"]

