"""Rules for the register and warp instructions of
:mod:`tessera.ir.dialects.target.ptx_ops` (bit manipulation, shuffles with register
operands, votes, ``redux.sync``, ``bar.warp.sync``, ``elect.sync``, tensor maps by
address); memory instructions are in :mod:`tessera.interp.target.ptx.memory`, ``wmma`` in
:mod:`tessera.interp.target.ptx.wmma`. Bit instructions follow
the pseudocode of their PTX ISA sections.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.target.flow import check_warps
from tessera.interp.target.regs import pure
from tessera.interp.target.state import DTYPES, Step, TargetCompiler, TargetFrame, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import ptx_ops, warp_ops

U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)


@step_rule(ptx_ops.Shf)
def _shf(c: TargetCompiler, instr: Instr) -> Step:
    left, clamp = instr.op.left, instr.op.clamp

    def shf(a: Any, b: Any, n: Any) -> Any:
        n = np.minimum(n, 32) if clamp else n & 31
        wide = (b.astype(U64) << np.uint64(32)) | a.astype(U64)
        n = n.astype(U64)
        if left:
            return ((wide << n) >> np.uint64(32)).astype(U32)
        return (wide >> n).astype(U32)
    return pure(c, instr, shf)


@step_rule(ptx_ops.Prmt)
def _prmt(c: TargetCompiler, instr: Instr) -> Step:
    def prmt(a: Any, b: Any, sel: Any) -> Any:
        wide = (b.astype(U64) << np.uint64(32)) | a.astype(U64)
        out = np.zeros(len(a), U32)
        for i in range(4):
            s = (sel.astype(U64) >> np.uint64(4 * i)) & np.uint64(15)
            byte = (wide >> ((s & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
            sign = np.where((byte & np.uint64(0x80)) != 0, np.uint64(0xFF), np.uint64(0))
            byte = np.where((s & np.uint64(8)) != 0, sign, byte)
            out |= (byte << np.uint64(8 * i)).astype(U32)
        return out
    return pure(c, instr, prmt)


@step_rule(ptx_ops.Lop3)
def _lop3(c: TargetCompiler, instr: Instr) -> Step:
    lut = instr.op.lut

    def lop3(a: Any, b: Any, d: Any) -> Any:
        out = np.zeros(np.shape(a), U32)
        for i in range(8):  # the minterms the table sets, OR-ed together
            if lut >> i & 1:
                out |= ((a if i & 4 else ~a) & (b if i & 2 else ~b) & (d if i & 1 else ~d))
        return out.astype(U32)
    return pure(c, instr, lop3)


@step_rule(ptx_ops.Bfe)
def _bfe(c: TargetCompiler, instr: Instr) -> Step:
    dt = DTYPES[instr.op.type]
    width = 8 * dt.itemsize
    signed = dt.kind == "i"
    ut = np.dtype(f"u{dt.itemsize}")

    def bfe(a: Any, pos: Any, length: Any) -> Any:
        pos = (pos & 0xFF).astype(np.int64)
        length = (length & 0xFF).astype(np.int64)
        bits = a.view(ut).astype(np.uint64)
        out = np.zeros(len(a), np.uint64)
        for i in range(width):  # d[i] = i < len && pos + i <= msb ? a[pos + i] : sbit
            src = pos + i
            inside = src <= width - 1
            bit = (bits >> np.minimum(src, width - 1).astype(np.uint64)) & np.uint64(1)
            sbit_pos = np.minimum(pos + length - 1, width - 1).astype(np.uint64)
            sbit = ((bits >> sbit_pos) & np.uint64(1)) if signed else np.uint64(0)
            sbit = np.where(length == 0, np.uint64(0), sbit)
            chosen = np.where((i < length) & inside, bit, sbit)
            out |= chosen << np.uint64(i)
        return out.astype(ut).view(dt)
    return pure(c, instr, bfe)


@step_rule(ptx_ops.Bfi)
def _bfi(c: TargetCompiler, instr: Instr) -> Step:
    dt = DTYPES[instr.op.type]
    width = 8 * dt.itemsize
    ut = np.dtype(f"u{dt.itemsize}")

    def bfi(f: Any, b: Any, pos: Any, length: Any) -> Any:
        pos = (pos & 0xFF).astype(np.int64)
        length = (length & 0xFF).astype(np.int64)
        fb, bb = f.view(ut).astype(np.uint64), b.view(ut).astype(np.uint64)
        out = bb.copy()
        for i in range(width):
            dst = pos + i
            put = (i < length) & (dst < width)
            bit = (fb >> np.uint64(i)) & np.uint64(1)
            at = np.minimum(dst, width - 1).astype(np.uint64)
            cleared = out & ~(np.uint64(1) << at)
            out = np.where(put, cleared | (bit << at), out)
        return out.astype(ut).view(dt)
    return pure(c, instr, bfi)


@step_rule(ptx_ops.BitCount)
def _bitcount(c: TargetCompiler, instr: Instr) -> Step:
    kind, dt = instr.op.kind, DTYPES[instr.op.type]
    width = 8 * dt.itemsize
    ut = np.dtype(f"u{dt.itemsize}")

    def count(a: Any) -> Any:
        bits = a.view(ut).astype(np.uint64)
        if kind == "bfind" and dt.kind == "i":  # the highest bit that differs from sign
            sign = (bits >> np.uint64(width - 1)) & np.uint64(1)
            mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(2**64 - 1)
            bits = np.where(sign == 1, ~bits & mask, bits)
        table = [(bits >> np.uint64(i)) & np.uint64(1) for i in range(width)]
        if kind == "popc":
            return sum(t.astype(U32) for t in table).astype(U32)
        if kind == "brev":
            out = np.zeros(len(a), np.uint64)
            for i, t in enumerate(table):
                out |= t << np.uint64(width - 1 - i)
            return out.astype(ut).view(dt)
        top = np.full(len(a), -1, np.int64)
        for i, t in enumerate(table):
            top = np.where(t == 1, i, top)
        if kind == "clz":
            return (width - 1 - top).astype(U32)
        return np.where(top < 0, np.uint32(0xFFFFFFFF), top.astype(U32))
    return pure(c, instr, count)


def warp_members(fr: TargetFrame, instr: Instr, masks: np.ndarray, what: str
                 ) -> tuple[np.ndarray, list[np.ndarray]]:
    """A ``.sync`` warp instruction's member masks from a register: each thread's own
    (-1 where it is idle), and the groups of threads that run it together, one per
    distinct mask. Lanes of one warp may name different masks (cooperative groups'
    tiles of 16 each name their half); a fault unless every lane a thread's mask names,
    itself included, executes the instruction with that same mask (PTX ISA, sec.
    9.7.8.6: otherwise the result is undefined)."""
    m = fr.m
    own = np.where(fr.mask, masks.astype(np.int64) & 0xFFFFFFFF, -1)
    groups = []
    for value in np.unique(own[fr.mask]):
        group = own == value
        lanes = group.reshape(-1, 32)
        bits = (lanes.astype(np.int64) << np.arange(32)).sum(axis=1)
        wrong = np.flatnonzero(lanes.any(axis=1) & (bits != value))
        if len(wrong):
            k = int(np.flatnonzero(group.reshape(-1, 32)[wrong[0]])[0]) + 32 * int(wrong[0])
            raise m.fault(instr, "warp divergence", f"lane {k % 32} names member mask "
                          f"{int(value):#010x}, but the lanes that execute the {what} with "
                          f"that mask are {int(bits[wrong[0]]):#010x}; {what} needs every "
                          "member lane converged, each naming the same mask", k)
        groups.append(group)
    return own, groups


def _groups(fr: TargetFrame, instr: Instr, fixed: np.ndarray, slot: int | None, what: str
            ) -> list[np.ndarray]:
    """The groups of threads that run the instruction together: one of the constant
    mask ``fixed`` (each warp runs it with exactly those lanes or none), or one per
    distinct mask in register ``slot`` (:func:`warp_members`)."""
    if slot is not None:
        return warp_members(fr, instr, fr.regs[slot], what)[1]
    active = check_warps(fr, instr, 32, fixed)
    return [np.repeat(active, 32) & np.tile(fixed, len(active))]


@step_rule(ptx_ops.ShflSync)
def _shfl_sync(c: TargetCompiler, instr: Instr) -> Step:
    mode = instr.op.mode
    a, b, cc, mk = (c.slot(v) for v in instr.operands)
    out, pred = (c.slot(v) for v in instr.results)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        lane = m.tid % 32
        warp_mask, _ = warp_members(fr, instr, fr.regs[mk], "shfl.sync")  # own masks
        bb = fr.regs[b].astype(np.int64) & 31
        cv = fr.regs[cc].astype(np.int64)
        clamp, seg = cv & 31, (cv >> 8) & 31
        max_lane = (lane & seg) | (clamp & ~seg)
        min_lane = lane & seg
        if mode == "up":
            j = lane - bb
            ok = j >= max_lane
        else:
            j = {"down": lane + bb, "bfly": lane ^ bb}.get(mode, min_lane | (bb & ~seg))
            ok = j <= max_lane
        j = np.where(ok, j, lane)
        src = m.lin - lane + j
        outside = fr.mask & ~((warp_mask >> j) & 1).astype(bool)
        if outside.any():
            k = int(np.flatnonzero(outside)[0])
            raise m.fault(instr, "warp divergence", f"reads lane {int(j[k])}, which is not "
                          "in the member mask (the result would be undefined)", k)
        fr.regs[out] = fr.regs[a][src]
        fr.regs[pred] = ok
    return step


@step_rule(ptx_ops.Vote)
def _vote(c: TargetCompiler, instr: Instr) -> Step:
    mode = instr.op.mode
    fixed = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)
    src = c.slot(instr.operands[0]) if instr.operands else None
    mask = c.slot(instr.operands[1]) if len(instr.operands) > 1 else None
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        if mode == "active":
            per = fr.mask.reshape(-1, 32)
            bits = (per.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1)
            fr.regs[out] = np.repeat(bits.astype(U32), 32)
            return
        result = np.zeros(fr.m.n, U32 if mode == "ballot" else bool)
        for members in _groups(fr, instr, fixed, mask, "vote.sync"):
            p = (fr.regs[src] & members).reshape(-1, 32)
            if mode == "ballot":
                bits = (p.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1)
                res = bits.astype(U32)
            else:
                count, total = p.sum(axis=1), members.reshape(-1, 32).sum(axis=1)
                res = {"all": count == total, "any": count > 0,
                       "uni": (count == 0) | (count == total)}[mode]
            result = np.where(members, np.repeat(res, 32), result)
        fr.regs[out] = result
    return step


@step_rule(warp_ops.Redux)
def _redux(c: TargetCompiler, instr: Instr) -> Step:
    op, dt = instr.op.op, DTYPES[instr.op.type]
    fixed = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)
    src, out = c.slot(instr.operands[0]), c.slot(instr.results[0])
    mask = c.slot(instr.operands[1]) if len(instr.operands) > 1 else None
    info = np.iinfo(dt)
    # each operation with the value that leaves it unchanged (a non-member's stand-in)
    fold, identity = {"add": (np.add, 0), "min": (np.minimum, info.max),
                      "max": (np.maximum, info.min), "and": (np.bitwise_and, -1 if
                                                              info.min else info.max),
                      "or": (np.bitwise_or, 0), "xor": (np.bitwise_xor, 0)}[op]

    def step(fr: TargetFrame) -> None:
        result = np.zeros(fr.m.n, dt)
        for members in _groups(fr, instr, fixed, mask, "redux.sync"):
            lanes = np.where(members.reshape(-1, 32), fr.regs[src].astype(dt).reshape(-1, 32),
                             dt.type(identity))
            if op == "add":  # wraps modulo 2^32, as the ISA says
                total = (lanes.astype(np.int64).sum(axis=1) & 0xFFFFFFFF).astype(U32).view(dt)
            else:
                total = fold.reduce(lanes, axis=1)
            result = np.where(members, np.repeat(total, 32), result)
        fr.regs[out] = result
    return step


@step_rule(warp_ops.Match)
def _match(c: TargetCompiler, instr: Instr) -> Step:
    fixed = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)
    src = c.slot(instr.operands[0])
    mask = c.slot(instr.operands[1]) if len(instr.operands) > 1 else None
    outs = [c.slot(v) for v in instr.results]
    bit = np.uint64(1) << np.arange(32, dtype=np.uint64)

    def step(fr: TargetFrame) -> None:
        found, alike = np.zeros(fr.m.n, U32), np.zeros(fr.m.n, bool)
        v = fr.regs[src].reshape(-1, 32)
        for group in _groups(fr, instr, fixed, mask, "match.sync"):
            members = group.reshape(-1, 32)
            same = (v[:, :, None] == v[:, None, :]) & members[:, None, :]  # i sees lane j
            lanes = (same * bit).sum(axis=2).astype(U32)  # the mask of equal member lanes
            if instr.op.mode == "any":
                found = np.where(group, lanes.ravel(), found)
                continue
            full = (members * bit).sum(axis=1).astype(U32)[:, None]
            equal = (members & (lanes == full)).ravel()
            found = np.where(group, np.where(equal, np.broadcast_to(full, lanes.shape).ravel(),
                                             0), found).astype(U32)
            alike = np.where(group, equal, alike)
        fr.regs[outs[0]] = found
        if instr.op.mode != "any":
            fr.regs[outs[1]] = alike
    return step


@step_rule(ptx_ops.WarpSync)
def _warp_sync(c: TargetCompiler, instr: Instr) -> Step:
    members = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)

    def step(fr: TargetFrame) -> None:
        warps = np.flatnonzero(check_warps(fr, instr, 32, members))
        sh = fr.m.shared
        if not sh.races or not len(warps) or sh.size == 0:
            return
        # a new race epoch for the accesses of these warps' lanes only
        syncing = np.zeros(fr.m.n // 32 + 1, bool)
        syncing[warps] = True
        w = sh.writer  # ids, -1: none (the coded records' copies)
        sh.writer_code[(w >= 0) & syncing[np.maximum(w, 0) // 32]] = 0
        lo, hi = sh.rmin, sh.rmax
        read = (hi >= 0) & (lo // 32 == hi // 32) & syncing[np.maximum(hi, 0) // 32]
        sh.rmin_code[read] = 0
        sh.rmax_code[read] = 0
        if sh.clustered is not None:  # and their accesses of other CTAs' memory
            sh.clustered.warp_sync(syncing)
    return step


@step_rule(ptx_ops.Elect)
def _elect(c: TargetCompiler, instr: Instr) -> Step:
    members = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)
    lane_out, pred_out = (c.slot(v) for v in instr.results)
    slot = c.slot(instr.operands[0]) if instr.operands else None

    def step(fr: TargetFrame) -> None:
        lanes = np.zeros(len(fr.mask), U32)
        elected = np.zeros(len(fr.mask), bool)
        for group in _groups(fr, instr, members, slot, "elect.sync"):
            act = group.reshape(-1, 32)  # each warp's lanes of this member mask
            leader = np.repeat(np.where(act.any(axis=1), act.argmax(axis=1), 0), 32)
            lanes = np.where(group, leader, lanes).astype(U32)
            elected |= group & ((fr.m.tid % 32) == leader)
        fr.regs[lane_out] = lanes
        fr.regs[pred_out] = elected
    return step


@step_rule(ptx_ops.TensorMapAt)
def _tmap_at(c: TargetCompiler, instr: Instr) -> Step:
    a = c.slot(instr.operands[0])
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        m: Any = fr.m
        act = np.flatnonzero(fr.mask)
        addrs = np.unique(fr.regs[a][act]) if len(act) else np.array([], np.uint64)
        tmaps = getattr(m, "tmaps", {})
        # a .param address used without cvta.param is accepted as the parameter's
        addrs = np.where(addrs < ptx_ops.PARAM_WINDOW, addrs + np.uint64(ptx_ops.PARAM_WINDOW),
                         addrs)
        if len(addrs) > 1 or (len(addrs) and int(addrs[0]) not in tmaps):
            k = int(act[0])
            raise m.fault(instr, "tma", f"the tensor-map address {int(addrs[0]):#x} is not "
                          "the address of a tensor-map kernel parameter (or threads "
                          "disagree)", k)
        fr.regs[out] = tmaps[int(addrs[0])] if len(addrs) else None
    return step


__all__: list[str] = []
