"""Tensor-core instructions: ``ldmatrix``, ``mma.sync`` (sm_80) and ``wgmma`` (sm_90a).

Fragment layouts, the ldmatrix gather, descriptor decoding and the golden numerics come
from :mod:`tessera.arch` (PTX ISA sec. 9.7.14.5 and 9.7.15.5). Each instruction needs
its whole warp (``ldmatrix``, ``mma.sync``) or warpgroup of four warps (``wgmma``)
converged (``.sync.aligned``); every group with an active thread executes it, all at
once. Results are *wide*: float64 accumulators (D = C + the ascending-k float64 sum of
exact products, :func:`tessera.arch.mma.mma`).

``wgmma`` executes when issued (its D matrices pass along a chain as lazy register
values, :mod:`.accumulators`): its accumulator is final at once, so reading it before
``wgmma.wait_group`` is not detected here (the kernel verifier checks that order).
Shared bytes it reads must be initialised and have no copy in flight, and bytes written
by ``st.shared`` need a ``fence.proxy.async`` before a wgmma reads them (PTX ISA,
"Proxies": st.shared is generic proxy, wgmma reads through the async proxy).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import numpy as np

from tessera.arch.descriptor import operand_addresses
from tessera.arch.errors import ArchError
from tessera.arch.fragments import (
    mma_m16n8_c,
    mma_m16n8k8_a,
    mma_m16n8k8_b,
    mma_m16n8k16_a,
    mma_m16n8k16_b,
    mma_m16n8k32_a,
    mma_m16n8k32_b,
)
from tessera.arch.ldmatrix import ldmatrix
from tessera.arch.mma import FORMATS, INTEGER, tf32_unrounded, to_s32
from tessera.interp.target.flow import check_warps
from tessera.interp.target.memory import bulk
from tessera.interp.target.memory.async_order import groups_of
from tessera.interp.target.memory.state import CHUNK, DIRTY_BLOCK, take_chunks
from tessera.interp.target.state import (
    F64,
    Lazy,
    Machine,
    Step,
    TargetCompiler,
    TargetFrame,
    raw,
    step_rule,
)
from tessera.interp.target.tensorcore import accumulators
from tessera.interp.target.tensorcore import model as tensor_core
from tessera.interp.target.tensorcore.exact_mma import Operand, mma_operands
from tessera.interp.target.tensorcore.fragment_maps import FragmentMap
from tessera.ir.core import Instr
from tessera.ir.dialects.target import async_ops as target_async


def ldmatrix_spread(num: int, trans: bool) -> np.ndarray:
    """Where ``ldmatrix`` takes each 16-bit half of each lane's registers from the
    warp's ``num`` 8x8 matrices of rows in lane order (``(num * 64,)`` elements): the
    index, for lane ``l``, register ``k``, half ``h``, of ``(l, k, h)`` flattened. This
    is the gather :func:`tessera.arch.ldmatrix.ldmatrix` makes, as one index."""
    probe = np.arange(num * 64, dtype=np.uint16).reshape(1, -1).view(np.uint8)
    lanes = (np.arange(32) * 16 % (num * 128)).reshape(1, 32)
    regs = ldmatrix(probe, lanes, num, trans)  # (1, 32, num)
    return np.ascontiguousarray(regs, np.uint32).view(np.uint16).reshape(-1).astype(np.int64)


@step_rule(target_async.Ldmatrix)
def _ldmatrix(c: TargetCompiler, instr: Instr) -> Step:
    num, trans = instr.op.num, instr.op.trans
    a = c.slot(instr.operands[0])
    out = c.slot(instr.results[0])
    spread = ldmatrix_spread(num, trans)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        warps = np.flatnonzero(check_warps(fr, instr))
        result = np.zeros((m.n, num), np.uint32)
        if len(warps):
            lanes = warps[:, None] * 32 + np.arange(32)
            rows = lanes[:, : 8 * num].ravel()  # the threads that give row addresses
            fail = m.failer(instr, rows)
            sh = m.shared
            flat = sh.index(m.cta[rows], fr.regs[a][rows].astype(np.int64), 16, fail)
            # each row is one aligned 16-byte chunk when the CTAs' memories are too
            chunks = flat[:, 0] // CHUNK if sh.size % CHUNK == 0 else None
            sh.check_read(flat, rows, fail, chunks=chunks)
            # the warps' rows (checked above: aligned, inside) as 16-bit elements
            raw = sh.data[flat] if chunks is None else take_chunks(sh.data, chunks)
            elems = raw.reshape(len(warps), -1).view("<u2")
            regs = np.ascontiguousarray(elems[:, spread]).view(np.uint32)
            result[lanes.ravel()] = regs.reshape(-1, num)
        fr.regs[out] = result
    return step


def _fragment(m: Machine, regs: np.ndarray, warps: np.ndarray, fmap: FragmentMap, bits: int,
              fmt: str) -> Operand:
    """The prepared operand matrices of ``warps`` held in ``regs``; a register array that
    recent steps read (``mma.sync`` reuses each A fragment for a row of B fragments)
    is prepared once. Register arrays are never changed in place."""
    kept: dict[int, tuple[np.ndarray, np.ndarray, Operand]] = \
        m.__dict__.setdefault("mma_operands", {})
    hit = kept.get(id(regs))
    if hit is not None and hit[0] is regs and np.array_equal(hit[1], warps) and \
            hit[2].fmt == fmt and hit[2].values.shape[-2:] == (fmap.layout.rows,
                                                               fmap.layout.cols):
        return hit[2]
    operand = Operand(fmap.matrix(regs, warps, bits), fmt)
    kept[id(regs)] = (regs, warps, operand)
    while len(kept) > 16:
        kept.pop(next(iter(kept)))
    return operand


@cache
def _mma_sync_maps(bits: int) -> tuple[FragmentMap, FragmentMap, FragmentMap]:
    """The A, B and C maps of ``mma.sync`` with ``bits``-bit inputs (made once: a
    kernel holds many such instructions; maps are never changed)."""
    la, lb = {16: (mma_m16n8k16_a(), mma_m16n8k16_b()), 32: (mma_m16n8k8_a(),
              mma_m16n8k8_b())}.get(bits, (mma_m16n8k32_a(), mma_m16n8k32_b()))
    return FragmentMap(la), FragmentMap(lb), FragmentMap(mma_m16n8_c())


def _check_tf32(m: Machine, instr: Instr, values: np.ndarray, who: np.ndarray) -> None:
    """Fault where a ``.tf32`` operand holds bits a tf32 value has not
    (:func:`tessera.arch.mma.tf32_unrounded`); ``values`` is (G, rows, cols) of the
    thread groups starting at threads ``who``."""
    bad = tf32_unrounded(values).reshape(len(values), -1).any(axis=1)
    if bad.any():
        raise m.fault(instr, "tf32 operand", "a .tf32 operand holds a 32-bit pattern "
                      "with low significand bits set, which a tf32 value has not; round "
                      "it with cvt.rna.tf32.f32 first", int(who[np.flatnonzero(bad)[0]]))


@step_rule(target_async.MmaSync)
def _mma_sync(c: TargetCompiler, instr: Instr) -> Step:
    fa, fb = instr.op.atype, instr.op.btype
    sa, sb, sc = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    bits = FORMATS[fa][1]
    maps = _mma_sync_maps(bits)

    integer = instr.op.ctype == "s32"

    def step(fr: TargetFrame) -> None:
        m = fr.m
        warps = np.flatnonzero(check_warps(fr, instr))
        if not len(warps):
            fr.regs[out] = np.zeros((m.n, 4), np.int32) if integer else \
                tensor_core.result(m, np.zeros((m.n, 4), F64))
            return
        av = _fragment(m, fr.regs[sa], warps, maps[0], bits, fa)
        bv = _fragment(m, fr.regs[sb], warps, maps[1], bits, fb)
        if fa == "tf32":
            for v in (av, bv):
                _check_tf32(m, instr, v.elements, warps * 32)
        cv, unsigned = accumulators.matrices(m, raw(fr.regs, sc), warps, maps[2])
        if integer:
            fr.regs[out] = integer_result(m.n, maps[2], av, bv, cv, warps,
                                          instr.op.satfinite)
            return
        if not unsigned and m.tensor_cores == "exact":  # found once per chain
            unsigned = not (np.signbit(cv) & (cv == 0)).any()
        d = tensor_core.step(m, av, bv, cv, c_unsigned_zeros=unsigned)
        fr.regs[out] = accumulators.result(fr, maps[2], d, warps, unsigned)
    return step


def integer_result(n: int, layout: FragmentMap, a: Operand, b: Operand, c: np.ndarray,
                   groups: np.ndarray, satfinite: bool) -> np.ndarray:
    """The ``s32`` D registers (zero outside thread ``groups``) of an integer product.
    Every tensor-core model computes the exact sum (integer tensor cores do not round),
    kept to 32 bits by :func:`tessera.arch.mma.to_s32`; the registers are plain ``s32``,
    never wide."""
    regs = np.zeros((n, layout.layout.elements), np.int32)
    layout.scatter(to_s32(mma_operands(a, b, c, True), bool(satfinite)), regs, groups)
    return regs


def _uniform(fr: TargetFrame, instr: Instr, values: np.ndarray, groups: np.ndarray,
             what: str) -> np.ndarray:
    """One value per warpgroup; fault if the threads of a group disagree."""
    per = values.reshape(-1, 128)[groups]
    odd = (per != per[:, :1]).any(axis=1)
    if odd.any():
        g = int(groups[np.flatnonzero(odd)[0]])
        raise fr.m.fault(instr, "warp divergence", f"the {what} differs between threads "
                         "of one warpgroup; wgmma takes one value per warpgroup", g * 128)
    return per[:, 0]


def _chunk_order(local: np.ndarray, mn: int, k: int, eb: int) -> tuple[bool, np.ndarray] | None:
    """``(False, chunks)`` when the operand's bytes ``local`` (elements in (mn, k)
    order) are whole 16-byte chunks in that order, ``(True, chunks)`` when they are in
    (k, mn) order (an MN-major operand), else None: the operand is then one gather of
    chunks instead of an index per element."""
    chunks = bulk.chunks_in_order(local)
    if chunks is not None:
        return False, chunks
    chunks = bulk.chunks_in_order(local.reshape(mn, k, eb).transpose(1, 0, 2).reshape(-1))
    return None if chunks is None else (True, chunks)


#: bytes after which every wgmma swizzle pattern repeats (8 rows of the 128-byte
#: swizzle, PTX ISA sec. 9.7.15.5.1): start addresses that differ by a multiple of it
#: address the same bytes, moved by the difference
_ATOM = 1024
Layout = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, bool,
               tuple[bool, np.ndarray] | None]


def _layout(d: int, mn: int, k: int, eb: int, k_major: bool, size: int, base: int) -> Layout:
    """A descriptor's elements (``span``) and bytes (``local``) as indices into a CTA's
    ``size`` bytes at shared address ``base``, its dirty blocks, covered chunks (or
    None), whether it lies inside those bytes, and its chunk order (:func:`_chunk_order`)."""
    span = operand_addresses(d, mn, k, eb, k_major=k_major).reshape(-1) - base
    local = (span[:, None] + np.arange(eb)).reshape(-1)
    inside = bool(span.min() >= 0 and span.max() + eb <= size)
    chunks = bulk.covered_chunks(local, size)
    if chunks is not None:  # sorted: the blocks of the chunks without a sort
        blocks = chunks * CHUNK // DIRTY_BLOCK
        blocks = blocks[np.r_[True, blocks[1:] != blocks[:-1]]]
    else:
        blocks = np.unique(local[(local >= 0) & (local < size)] // DIRTY_BLOCK)
    order = _chunk_order(local, mn, k, eb) if inside and size % CHUNK == 0 else None
    return span, local, blocks, chunks, inside, order


def _translated(m: Machine, d: int, mn: int, k: int, eb: int, k_major: bool) -> Layout:
    """:func:`_layout` of ``d`` from that of the descriptor whose start address is
    ``d``'s modulo :data:`_ATOM` above the CTA's first byte (kept per launch): the
    stages of a pipeline share one."""
    size, first = m.shared.size, m.shared.base  # first: a multiple of _ATOM
    start = (d & 0x3FFF) << 4  # the descriptor's start address field (bits 0-13, >> 4)
    shift = (start - first) - (start - first) % _ATOM
    kept: dict = m.__dict__.setdefault("wgmma_layouts", {})
    key = (d - (shift >> 4), mn, k, eb, k_major)
    base = kept.get(key)
    if base is None:
        try:
            base = kept[key] = _layout(key[0], mn, k, eb, k_major, size, first)
        except ArchError:
            return _layout(d, mn, k, eb, k_major, size, first)  # the error names d itself
    if not shift:
        return base
    span0, local0, blocks0, chunks0, inside0, order0 = base
    span, local = span0 + shift, local0 + shift
    inside = inside0 and int(span0.min()) + shift >= 0 and int(span0.max()) + shift + eb <= size
    if chunks0 is None or not inside:
        return _layout(d, mn, k, eb, k_major, size, first)
    order = None if order0 is None else (order0[0], order0[1] + shift // CHUNK)
    return (span, local, blocks0 + shift // DIRTY_BLOCK, chunks0 + shift // CHUNK, inside,
            order)


def _operand(fr: TargetFrame, instr: Instr, ctas: np.ndarray, desc: np.ndarray, mn: int, k: int,
             eb: int, who: np.ndarray, k_major: bool, cache: dict) -> np.ndarray:
    """The (G, mn, k) element bit patterns a descriptor addresses in each CTA (a view
    of a (G, k, mn) array for an MN-major operand); ``cache`` keeps each descriptor's
    element addresses, bytes, dirty blocks and chunks."""
    m = fr.m
    sh = m.shared
    kinds = np.unique(desc).tolist()
    out = np.empty((len(ctas), mn, k), f"<u{eb}")  # every row set
    fail = m.failer(instr, who)
    for d in kinds:
        sel = np.flatnonzero(desc == d) if len(kinds) > 1 else np.arange(len(desc))
        hit = cache.get(d)
        if hit is None:
            try:
                hit = cache[d] = _translated(m, d, mn, k, eb, k_major)
            except ArchError as err:
                raise m.fault(instr, "wgmma descriptor", err.message,
                              int(who[sel[0]])) from None
        span, local, blocks, chunks, inside, order = hit
        if not inside:
            out_at = int(span.min()) if span.min() < 0 else int(span.max()) + eb - 1
            fail(int(sel[0]), "out of bounds", f"descriptor {d:#x} reaches shared address "
                 f"{sh.base + out_at}; {sh.outside(sh.base + out_at)}")
        start = ctas[sel, None] * sh.size
        if chunks is None or not _read_chunks(m, ctas[sel], who[sel], chunks, blocks):
            _read_bytes(m, start + local[None, :], who[sel], m.failer(instr, who[sel]))
        if order is not None:  # whole chunks: one row copy each
            per = ctas[sel, None] * (sh.size // CHUNK) + order[1][None, :]
            raw = take_chunks(sh.data, per).view(out.dtype)
            got = np.swapaxes(raw.reshape(len(sel), k, mn), 1, 2) if order[0] else \
                raw.reshape(len(sel), mn, k)
            if len(kinds) == 1:
                return got
            out[sel] = got
            continue
        if eb == 2 and sh.size % 2 == 0 and not (span % 2).any():  # aligned 16-bit words
            out[sel] = sh.data.view(np.uint16)[(start + span[None, :]) // 2].reshape(
                len(sel), mn, k)
            continue
        raw = sh.data[start + local[None, :]].reshape(len(sel), mn * k, eb)
        out[sel] = np.ascontiguousarray(raw).view(out.dtype).reshape(len(sel), mn, k)
    return out


def _read_chunks(m: Machine, ctas: np.ndarray, who: np.ndarray, chunks: np.ndarray,
                 blocks: np.ndarray) -> bool:
    """The records of :func:`_read_bytes` a 16-byte chunk at a time (:mod:`.memory.bulk`);
    False, with nothing recorded, when a check might fail or two rows share a CTA."""
    sh = m.shared
    if not bulk.distinct(ctas):
        return False
    index = bulk.chunk_index(sh, ctas, chunks)
    if not bulk.chunks_readable(sh, index) or bulk.chunks_unfenced(sh, index):
        return False
    if sh.races and (sh.clustered is not None or bulk.chunks_written(sh, ctas, index, blocks)):
        return False  # the byte path checks the writers, and records other CTAs' reads
    groups_of(m).read_chunks(who // 128, ctas, chunks)
    if sh.races:  # one rectangle, resolved into the per-byte records when looked at
        sh.log.add(ctas, chunks, blocks, who, who + 127)
    return True


def _read_bytes(m: Machine, flat: np.ndarray, who: np.ndarray,
                fail: Callable[[int, str, str], None]) -> None:
    """Check and record the warpgroups ``who`` reading the operand bytes ``flat``, byte
    by byte."""
    sh = m.shared
    # the whole warpgroup reads: any write not ordered before it by a barrier races,
    # and a later writer must be ordered after it
    sh.check_read(flat, who, fail, last=who + 127)
    groups_of(m).read(who // 128, flat)  # read until a wait_group retires it
    unfenced = sh.unfenced[flat]
    if unfenced.any():
        i = int(np.flatnonzero(unfenced.any(axis=1))[0])
        fail(i, "missing proxy fence", "wgmma reads shared memory written by "
             "st.shared with no fence.proxy.async since")


@step_rule(target_async.Wgmma)
def _wgmma(c: TargetCompiler, instr: Instr) -> Step:
    n, fa, fb = instr.op.n, instr.op.atype, instr.op.btype
    acc, da, db, scale = (c.slot(v) for v in instr.operands)
    out = c.slot(instr.results[0])
    layout = accumulators.fragment_map(n)
    # C's matrices may take D in place when nothing else can read them: C is the lazy
    # result of a wgmma whose one use is this one (a value of a block is made anew by
    # each run of it before any use)
    maker = instr.operands[0].owner
    users = c.users(instr.operands[0])
    private = isinstance(maker, Instr) and isinstance(maker.op, target_async.Wgmma) and \
        len(users) == 1 and users[0] is instr
    k = FORMATS[fa][2]
    eb = FORMATS[fa][1] // 8
    cache_a: dict = {}
    cache_b: dict = {}

    def step(fr: TargetFrame) -> None:
        m = fr.m
        groups = np.flatnonzero(check_warps(fr, instr, 128))
        if len(groups):
            who = groups * 128
            ctas = m.cta[who]
            desc_a = _uniform(fr, instr, fr.regs[da], groups, "A descriptor")
            desc_b = _uniform(fr, instr, fr.regs[db], groups, "B descriptor")
            keep = _uniform(fr, instr, fr.regs[scale], groups, "scale-d predicate")
            av = _operand(fr, instr, ctas, desc_a, 64, k, eb, who, not instr.op.trans_a,
                          cache_a)
            bv = np.swapaxes(_operand(fr, instr, ctas, desc_b, n, k, eb, who,
                                      not instr.op.trans_b, cache_b), 1, 2)
            if fa == "tf32":
                for v in (av, bv):
                    _check_tf32(m, instr, v, who)
            held = raw(fr.regs, acc)
            cv, unsigned = accumulators.matrices(m, held, groups, layout)
            # the lazy value's own matrices, which no other register holds
            mine = private and type(held) is Lazy and \
                isinstance(held.keep, accumulators.ChainResult) and held.keep.matrices is cv
            if not keep.all():
                cv = np.where(keep[:, None, None], cv, 0.0)  # scale-d false: D = A * B
            if fa in INTEGER:
                fr.regs[out] = integer_result(
                    m.n, layout, Operand(av, fa), Operand(bv, fb), cv, groups,
                    instr.op.satfinite)
                return
            if not unsigned and m.tensor_cores == "exact":  # found once per chain
                unsigned = not (np.signbit(cv) & (cv == 0)).any()
            d = tensor_core.step(m, av, bv, cv, fa, fb, unsigned, c_private=mine)
            result = accumulators.result(fr, layout, d, groups, unsigned)
        elif fa in INTEGER:
            result = np.zeros((m.n, n // 2), np.int32)
        else:
            result = tensor_core.result(m, accumulators.zeros_but(m.n, n // 2, groups, 128))
        fr.regs[out] = result
    return step


__all__: list[str] = []
