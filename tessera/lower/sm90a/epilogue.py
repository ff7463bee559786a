"""The TMA-store epilogue of the warp-specialised sm_90a GEMM (the main loop is
:mod:`tessera.lower.sm90a.pipeline`).

After the K loop the consumer warpgroups hold the ``(BM, BN)`` result, after any fused
epilogue (bias, activation, cast, residual), in the wgmma accumulator layout. Instead
of one ``st.global`` per register pair, they

1. meet at a **named barrier** of the consumer threads only (``bar.sync 1, 128 *
   consumers``; the producer warpgroup, which has finished, never joins it): every
   consumer's last ``wgmma`` has retired (``wgmma.wait_group 0``), so no thread reads
   the ring any more and the staging tile may overwrite it;
2. round the tile to the output format and write it to the **staging tile**:
   ``stmatrix.sync.aligned.m8n8.x4`` for bf16/f16 (one per 64-row block, warp and 16
   columns: four 8x8 matrices whose fragments are exactly a thread's accumulator
   registers, PTX ISA sec. 9.7.14.5.16), ``st.shared.v2.f32`` for f32 (``stmatrix``
   stores only 16-bit elements). The tile is laid out as a TMA box with a 128-byte
   swizzle reads it: panels of 128-byte rows (64 bf16 or 32 f32 columns), ``BM`` rows
   each, 16-byte chunks XOR-ed with ``row % 8`` (which also spreads a warp's rows over
   all 32 banks);
3. ``fence.proxy.async.shared::cta`` (the generic-proxy writes become visible to the
   TMA unit, sec. 9.7.13.4) and the named barrier again (every thread's part is there);
4. thread 0 issues one ``cp.async.bulk.tensor.2d.global.shared::cta.bulk_group`` per
   panel, ``cp.async.bulk.commit_group`` and ``cp.async.bulk.wait_group.read 0``: the
   CTA's shared memory must outlive the copy's reads of it.

The C tensor map is one more kernel parameter (``Lowerer.tensor_map``), built at
launch like those of A and B. Where the C tile is not a legal TMA box (a row pitch that
is not a multiple of 16 bytes, an output format TMA cannot store, a tile the layout
does not cover) the consumers store with ``st.global`` instead, and the kernel's
``epilogue`` attribute records why; ``config={"tma_store": True}`` makes that an
``UnsupportedError``, ``False`` always keeps ``st.global``.
"""

from __future__ import annotations

from typing import Any

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.async_ops import BulkCommit, BulkWait, Fence, TmaStore
from tessera.ir.dialects.target.ops import Bar
from tessera.ir.dialects.target.ptx_ops import Stmatrix
from tessera.lower.core import Lowerer, Rule
from tessera.lower.emit import TargetEmitter
from tessera.lower.sm80.copy import Lanes, lin
from tessera.lower.sm90a.tma import thread0
from tessera.lower.sm90a.warpspec import SHARED_BUDGET, PipelinePlan, config_of
from tessera.lower.values import Dist, Lowered, Mem, ptx_elem

#: the named barrier of the consumer warpgroups (0 is the CTA-wide bar.sync)
CONSUMER_BARRIER = 1
_SPAN = 128  # the staging tile's swizzle: 128-byte panel rows
_ALIGN = 1024  # a 128-byte swizzle atom: panels start on it


def epilogue_rule(plan: PipelinePlan) -> Rule:
    """The rule of the kernel's final ``tile.store``: the TMA-store epilogue where the
    tile allows one, else the ``st.global`` store (split between the consumers when
    there are two)."""
    def store(low: Lowerer, instr: Instr, args: list[Lowered]) -> list[Lowered]:
        from tessera.lower.core import RULES
        from tessera.lower.rules.tensor import materialize

        view, value = args
        value = materialize(low, value, low.layouts.get(instr.operands[1]))
        why = tma_problem(low, plan, view, value)
        asked = config_of(low.fn).get("tma_store")
        if why and asked:
            raise UnsupportedError(f"the TMA-store epilogue: {why}", loc=instr.loc,
                                   hint="set tma_store=False to store with st.global")
        attrs = low.extra.setdefault("attrs", {})
        if why is None:
            assert isinstance(view, Mem) and isinstance(value, Dist)
            tma_store_tile(low, plan, view, value)
            attrs["epilogue"] = "tma_store"
            return []
        attrs["epilogue"] = f"st.global: {why}"
        if plan.consumers > 1:
            from tessera.lower.sm90a.pipeline import split_store

            split_store(low, plan, view, value)
        else:  # the ordinary tile.store rule
            RULES[type(instr.op)](low, instr, [view, value])
        return []
    return store


def tma_problem(low: Lowerer, plan: PipelinePlan, view: Lowered, value: Lowered) -> str | None:
    """Why the consumers cannot store ``value`` into ``view`` through a TMA box (None
    when they can)."""
    from tessera.lower.layout import Acc

    g = plan.gemm
    if config_of(low.fn).get("tma_store") is False:
        return "tma_store=False"
    if not (isinstance(view, Mem) and view.space == "global" and view.meta.get("arg")
            is not None and len(view.shape) == 2 and view.strides[-1] == 1):
        return "the tile is not stored into a 2-D row-major view of a kernel parameter"
    if not (isinstance(value, Dist) and isinstance(value.layout, Acc) and value.type == "f32"
            and (value.layout.rows, value.layout.cols) == (g.bm, g.bn)):
        return "the stored tile is not the f32 accumulator layout of the whole tile"
    elem = ptx_elem(view.element)
    if elem not in ("bf16", "f16", "f32"):
        return f"{elem} output (the epilogue stores bf16, f16 or f32)"
    esize = 2 if elem != "f32" else 4
    pitch = view.strides[0] * esize
    if pitch % 16:  # cuTensorMapEncodeTiled: globalStrides multiples of 16 bytes
        return (f"C rows of {pitch} bytes: a TMA tensor map needs a row pitch that is a "
                "multiple of 16 bytes")
    if tuple(view.shape) != (g.bm, g.bn) or (g.bn * esize) % _SPAN or g.bm > 256:
        return f"a {view.shape} view is not {g.bm}x{g.bn} boxes of 128-byte rows"
    if isinstance(staging(low, plan, g.bm * g.bn * esize), str):
        return str(staging(low, plan, g.bm * g.bn * esize))
    return None


def staging(low: Lowerer, plan: PipelinePlan, nbytes: int) -> tuple[Any, ...] | str:
    """Where the ``nbytes`` staging tile goes: ``("ring",)`` (the drained ring holds it),
    ``("own",)`` (a buffer of its own fits the budget beside the ring), or why neither."""
    ring = plan.stages * plan.gemm.stage_bytes
    if nbytes <= ring and not plan.persistent:  # a persistent CTA's ring refills meanwhile
        return ("ring",)
    if plan.shared_bytes + nbytes <= SHARED_BUDGET:
        return ("own",)
    if plan.persistent:
        return (f"the {nbytes}-byte staging tile does not fit beside the {ring}-byte ring, "
                f"which a persistent CTA refills meanwhile ({SHARED_BUDGET} bytes)")
    return (f"the {nbytes}-byte staging tile fits neither the {ring}-byte ring nor the "
            f"shared memory beside it ({SHARED_BUDGET} bytes)")


def staging_bytes(plan: PipelinePlan, tma_store: bool | None) -> int:
    """The bytes of the staging tile of the plan's final store (0 where it has none:
    no such store, ``tma_store=False``, or an output format the epilogue does not
    stage)."""
    store = plan.epilogue
    if store is None or tma_store is False:
        return 0
    elem = ptx_elem(store.operands[0].type.element)  # type: ignore[attr-defined]
    if elem not in ("bf16", "f16", "f32"):
        return 0
    return plan.gemm.bm * plan.gemm.bn * (4 if elem == "f32" else 2)


def reserve(low: Lowerer, plan: PipelinePlan) -> None:
    """Allocate a staging tile of its own (before the producer/consumer split, whose
    regions its address must dominate) when the drained ring cannot hold it."""
    nbytes = staging_bytes(plan, config_of(low.fn).get("tma_store"))
    if nbytes and staging(low, plan, nbytes) == ("own",):
        low.extra["epi_stage"] = low.shared_buffer("epi_stage", nbytes, _ALIGN)


def tma_store_tile(low: Lowerer, plan: PipelinePlan, view: Mem, value: Dist) -> None:
    """Steps 1-4 of the module doc for ``value`` (the consumers' accumulator blocks)."""
    e, g = low.em, plan.gemm
    elem = ptx_elem(view.element)
    esize = 2 if elem != "f32" else 4
    nbytes = g.bm * g.bn * esize
    if staging(low, plan, nbytes) == ("ring",):
        # every TMA load has landed (the consumers waited for each stage) and every
        # wgmma reading the ring has retired (wait_group 0 before the barrier below):
        # the ring's bytes are free for the staging tile
        base = low.extra["pipe_ring"]
    else:
        base = low.extra["epi_stage"]
    threads = 128 * plan.consumers
    e.op(Bar(CONSUMER_BARRIER, threads))
    if esize == 2:
        _stmatrix_tile(e, plan, value.regs, base, elem)
    else:
        _st_shared_tile(e, plan, value.regs, base)
    e.op(Fence("proxy_async"))
    e.op(Bar(CONSUMER_BARRIER, threads))
    width = _SPAN // esize
    tmap = low.tensor_map(view.meta["arg"], elem, (g.bm, width), _SPAN)
    stride = e.const(view.strides[0], "s32")
    off = view.offset if view.offset is not None else e.const(0, "s32")
    row, col = e.bin("div", off, stride, "s32"), e.bin("rem", off, stride, "s32")
    if view.meta.get("batch_rows"):  # the map spans every batch slice
        batch = e.cvt(e.sreg("ctaid.y"), "s32", "u32")
        row = e.add(row, e.mul(batch, e.const(view.meta["batch_rows"], "s32"), "s32"), "s32")

    def issue(t: TargetEmitter) -> None:
        for p in range(g.bn // width):
            src = base if p == 0 else t.add(base, t.const(p * g.bm * _SPAN, "u32"), "u32")
            c = col if p == 0 else t.add(col, t.const(p * width, "s32"), "s32")
            t.op(TmaStore(), [src, tmap, c, row])
        t.op(BulkCommit())
        # the shared memory must outlive the copies' reads: the CTA exits after this
        t.op(BulkWait(0, read=True))
    e.if_(thread0(e), issue)


def _rows(e: TargetEmitter, plan: PipelinePlan, lanes: Lanes) -> Value:
    """``16 * (warp % 4) + 64 * blocks * warpgroup``: the first accumulator row of this
    thread's warp (warpgroup ``w`` of two consumers holds blocks ``[w * blocks, ...)``)."""
    mine = plan.gemm.bm // 64 // plan.consumers
    terms = [(lanes.bits(5, 3), 16)]
    if plan.consumers > 1:
        terms.append((lanes.bits(7, 0), 64 * mine))
    return lin(e, terms)


def _chunks(e: TargetEmitter, row_base: Value, y: Value, extra: int = 0) -> list[Value]:
    """``base + row * 128 + ((2k * 16) ^ (16 y)) + extra`` for k = 0..3: the four
    swizzled 16-byte chunk addresses of even chunk ``2k`` (the odd one's XOR bit is in
    ``y``, whose low three bits are ``row % 8`` XOR the chunk's own low bit)."""
    y16 = e.bin("shl", y, e.const(4, "u32"), "u32")
    out = []
    for k in range(4):
        x = y16 if k == 0 else e.bin("xor", y16, e.const(32 * k, "u32"), "u32")
        addr = e.add(row_base, x, "u32")
        out.append(e.add(addr, e.const(extra, "u32"), "u32") if extra else addr)
    return out


def _stmatrix_tile(e: TargetEmitter, plan: PipelinePlan, regs: list[Value], base: Value,
                   elem: str) -> None:
    """The 16-bit staging tile: per 64-row block and 16 columns, one ``stmatrix.x4``.
    Matrix ``m`` is rows ``8 (m % 2)``.. and columns ``8 (m // 2)``.. of the warp's 16 x
    16 piece; lane ``l`` gives the address of row ``l % 8`` of matrix ``l // 8``, and
    its register ``m`` packs accumulator registers ``8 j + 2 m`` and ``+1`` (rows
    ``l / 4 + 8 (m % 2)``, columns ``16 j + 8 (m // 2) + 2 (l % 4)``)."""
    g = plan.gemm
    lanes = Lanes(e)
    m = lanes.bits(3, 3)  # the matrix this lane addresses
    r = lanes.bits(0, 7)  # its row in the matrix: row % 8
    row = e.add(_rows(e, plan, lanes), lin(e, [(e.bin("and", m, e.const(1, "u32"), "u32"), 8),
                                               (r, 1)]), "u32")
    row_base = e.add(base, e.bin("shl", row, e.const(7, "u32"), "u32"), "u32")
    y = e.bin("xor", e.bin("shr", m, e.const(1, "u32"), "u32"), r, "u32")
    chunk = _chunks(e, row_base, y)
    half, panel = g.bn // 2, g.bm * _SPAN
    for blk in range(len(regs) // half):
        for j in range(g.bn // 16):
            pairs = []
            for k in range(4):
                lo, hi = regs[blk * half + 8 * j + 2 * k: blk * half + 8 * j + 2 * k + 2]
                pairs.append(e.pack([e.cvt([hi, lo], f"{elem}x2", "f32", "rn")], "b32"))
            static = (16 * j // 64) * panel + 64 * blk * _SPAN
            e.op(Stmatrix(4, False, static), [chunk[(j % 4)], e.pack(pairs, "b32")])


def _st_shared_tile(e: TargetEmitter, plan: PipelinePlan, regs: list[Value],
                    base: Value) -> None:
    """The f32 staging tile: each register pair (columns ``8 j + 2 (l % 4)``, ``+1``)
    is one 8-byte ``st.shared.v2.f32``; chunk ``2 (j % 4) + (l % 4) / 2`` of the row,
    byte ``8 (l % 2)`` in it."""
    g = plan.gemm
    lanes = Lanes(e)
    gq = lanes.bits(2, 7)
    row = e.add(_rows(e, plan, lanes), gq, "u32")
    row_base = e.add(base, e.bin("shl", row, e.const(7, "u32"), "u32"), "u32")
    row_base = e.add(row_base, lin(e, [(lanes.bits(0, 1), 8)]), "u32")
    y = e.bin("xor", lanes.bits(1, 1), gq, "u32")
    chunk = _chunks(e, row_base, y)
    half, panel = g.bn // 2, g.bm * _SPAN
    for r in range(0, len(regs), 2):
        blk, i = divmod(r, half)
        h, j = (i >> 1) & 1, i >> 2
        static = (8 * j // 32) * panel + (64 * blk + 8 * h) * _SPAN
        e.st("shared", chunk[j % 4], e.pack(regs[r:r + 2], "f32"), "f32", vec=2,
             offset=static)


__all__ = ["CONSUMER_BARRIER", "epilogue_rule", "reserve", "staging", "staging_bytes",
           "tma_problem", "tma_store_tile"]
