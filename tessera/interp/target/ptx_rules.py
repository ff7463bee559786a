"""Rules for the instructions of :mod:`tessera.ir.dialects.target.ptx_ops`.

Generic addresses: global buffers are at their own addresses (``cvta.global`` is the
identity), the CTA's shared memory at ``SHARED_WINDOW`` and the kernel's parameter
space at ``PARAM_WINDOW``. Atomics apply in linear thread order and return the value
each thread saw. Bit instructions follow the pseudocode of their PTX ISA sections.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.interp.target.memory_steps import to_bytes
from tessera.interp.target.regs import pure, unsupported
from tessera.interp.target.state import DTYPES, Step, TargetCompiler, TargetFrame, narrow, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import ptx_ops

U32 = np.dtype(np.uint32)
U64 = np.dtype(np.uint64)


@step_rule(ptx_ops.ParamLoad)
def _param(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    out = c.slot(instr.results[0])
    dt = DTYPES[op.type]

    def step(fr: TargetFrame) -> None:
        m: Any = fr.m
        start = m.param_offsets[op.param] + op.offset
        raw = m.params[start:start + dt.itemsize * op.vec]
        value = raw.view(dt)
        n = m.n
        fr.regs[out] = (np.full(n, value[0]) if op.vec == 1
                        else np.broadcast_to(value, (n, op.vec)).copy())
    return step


@step_rule(ptx_ops.Cvta)
def _cvta(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    if op.space in ("local", "const"):
        raise unsupported(instr, f"the .{op.space} state space")
    base = {"global": 0, "shared": ptx_ops.SHARED_WINDOW,
            "param": ptx_ops.PARAM_WINDOW}[op.space]
    delta = np.uint64(base)
    if op.to:
        return pure(c, instr, lambda a: (a - delta).astype(U64))
    return pure(c, instr, lambda a: (a + delta).astype(U64))


def _split(fr: TargetFrame, addr: np.ndarray, act: np.ndarray) -> np.ndarray:
    """Which of the active threads' generic addresses lie in the shared window."""
    size = fr.m.shared.size
    a = addr.astype(np.int64)
    return (a >= ptx_ops.SHARED_WINDOW) & (a < ptx_ops.SHARED_WINDOW + max(size, 1))


@step_rule(ptx_ops.GenericLoad)
def _generic_load(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    a = c.slot(instr.operands[0])
    out = c.slot(instr.results[0])
    dt = DTYPES[op.type]
    size = dt.itemsize * op.vec
    shape: tuple[int, ...] = (c.m.n,) if op.vec == 1 else (c.m.n, op.vec)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        addr = fr.regs[a][act].astype(np.int64) + op.offset
        sh = _split(fr, addr, act)
        raw = np.zeros((len(act), size), np.uint8)
        if (~sh).any():
            who = act[~sh]
            raw[~sh] = m.glob.read(addr[~sh], size, m.failer(instr, who))
        if sh.any():
            who = act[sh]
            fail = m.failer(instr, who)
            flat = m.shared.index(m.cta[who], addr[sh] - ptx_ops.SHARED_WINDOW, size, fail)
            raw[sh] = m.shared.read(flat, who, fail)
        values = np.zeros(shape, dt)
        values[act] = raw.view(dt).reshape((len(act), *shape[1:]))
        fr.regs[out] = values
    return step


@step_rule(ptx_ops.GenericStore)
def _generic_store(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    a, v = (c.slot(x) for x in instr.operands)
    dt = DTYPES[op.type]
    size = dt.itemsize * op.vec

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        addr = fr.regs[a][act].astype(np.int64) + op.offset
        data = to_bytes(narrow(fr.regs[v][act], op.type).astype(dt), len(act))
        sh = _split(fr, addr, act)
        if (~sh).any():
            m.glob.write(addr[~sh], data[~sh], m.failer(instr, act[~sh]))
        if sh.any():
            who = act[sh]
            fail = m.failer(instr, who)
            flat = m.shared.index(m.cta[who], addr[sh] - ptx_ops.SHARED_WINDOW, size, fail)
            m.shared.write(flat, data[sh], who, fail)
    return step


def _atomic_update(op: str, dt: np.dtype, old: np.ndarray, b: np.ndarray,
                   cmp: np.ndarray | None) -> np.ndarray:
    if op == "exch":
        return b
    if op == "cas":
        return np.where(old == cmp, b, old)
    if op == "inc":  # (old >= b) ? 0 : old + 1
        return np.where(old >= b, 0, old + 1).astype(dt)
    if op == "dec":  # (old == 0 || old > b) ? b : old - 1
        return np.where((old == 0) | (old > b), b, old - 1).astype(dt)
    fn = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and,
          "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    if dt.kind == "f" and op in ("min", "max"):
        return np.fmin(old, b) if op == "min" else np.fmax(old, b)
    return fn(old, b).astype(dt)


def _apply_in_order(target: np.ndarray, index: np.ndarray, op: str, dt: np.dtype,
                    b: np.ndarray, cmp: np.ndarray | None) -> np.ndarray:
    """Apply the updates to ``target`` one per thread in thread order; the old values."""
    order = np.argsort(index, kind="stable")
    idx = index[order]
    start = np.r_[0, np.flatnonzero(np.diff(idx)) + 1]
    rank = np.empty(len(idx), np.int64)
    rank[:] = np.arange(len(idx)) - np.repeat(start, np.diff(np.r_[start, len(idx)]))
    olds = np.empty(len(idx), dt)
    for r in range(int(rank.max()) + 1 if len(idx) else 0):
        sel = order[rank == r]  # the r-th update of every address: distinct addresses
        old = target[index[sel]].copy()
        olds[sel] = old
        target[index[sel]] = _atomic_update(op, dt, old, b[sel],
                                            None if cmp is None else cmp[sel])
    return olds


@step_rule(ptx_ops.Atom)
def _atom(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    if op.type in ("f16", "bf16", "f16x2", "bf16x2") or (
            op.type.startswith("f") and op.op not in ("add", "exch", "min", "max")):
        raise unsupported(instr, f"atom.{op.op}.{op.type}")
    slots = [c.slot(x) for x in instr.operands]
    out = c.slot(instr.results[0])
    dt = DTYPES[op.type]

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        result = np.zeros(m.n, dt)
        if len(act):
            addr = fr.regs[slots[0]][act].astype(np.int64)
            b = narrow(fr.regs[slots[1]][act], op.type).astype(dt)
            cmp = None
            if op.op == "cas":
                cmp, b = b, fr.regs[slots[2]][act].astype(dt)
            shared = (np.ones(len(act), bool) if op.space == "shared" else
                      np.zeros(len(act), bool) if op.space == "global"
                      else _split(fr, addr, act))
            if op.space == "" and shared.any():
                addr = np.where(shared, addr - ptx_ops.SHARED_WINDOW, addr)
            olds = np.zeros(len(act), dt)
            with np.errstate(all="ignore"):
                if (~shared).any():
                    sel = np.flatnonzero(~shared)
                    fail = m.failer(instr, act[sel])
                    k, off = m.glob.resolve(addr[sel], dt.itemsize, fail, "atomic")
                    for buf in np.unique(k):
                        part = k == buf
                        raw = m.glob.bytes[buf]
                        view = raw[: raw.size // dt.itemsize * dt.itemsize].view(dt)
                        olds[sel[part]] = _apply_in_order(
                            view, off[part] // dt.itemsize, op.op, dt, b[sel[part]],
                            None if cmp is None else cmp[sel[part]])
                if shared.any():
                    sel = np.flatnonzero(shared)
                    who = act[sel]
                    fail = m.failer(instr, who)
                    flat = m.shared.index(m.cta[who], addr[sel], dt.itemsize, fail)
                    m.shared.check_read(flat, who, fail, race=False)
                    olds[sel] = _apply_in_order(m.shared.data.view(dt),
                                                flat[:, 0] // dt.itemsize, op.op, dt, b[sel],
                                                None if cmp is None else cmp[sel])
            result[act] = olds
        fr.regs[out] = result
    return step


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


@step_rule(ptx_ops.ShflSync)
def _shfl_sync(c: TargetCompiler, instr: Instr) -> Step:
    mode = instr.op.mode
    a, b, cc, mk = (c.slot(v) for v in instr.operands)
    out, pred = (c.slot(v) for v in instr.results)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        lane = m.tid % 32
        mask = fr.regs[mk].astype(np.int64) & 0xFFFFFFFF
        act = np.flatnonzero(fr.mask)
        # every active thread must be in its own member mask, and every member active
        first = np.full(m.n // 32, -1, np.int64)
        first[act[::-1] // 32] = mask[act[::-1]]
        warp_mask = first[m.lin // 32]
        members = ((warp_mask >> lane) & 1).astype(bool)
        bad = (fr.mask & (mask != warp_mask)) | (fr.mask & ~members) | \
            ((warp_mask >= 0) & members & ~fr.mask)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise m.fault(instr, "warp divergence", f"lane {int(lane[k])} disagrees with its "
                          "warp on the member mask or is a member that did not execute the "
                          "shuffle; shfl.sync needs every member lane converged", k)
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
    from tessera.interp.target.flow import check_warps

    mode = instr.op.mode
    members = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)
    src = c.slot(instr.operands[0]) if instr.operands else None
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        if mode == "active":
            per = fr.mask.reshape(-1, 32)
            bits = (per.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1)
            fr.regs[out] = np.repeat(bits.astype(U32), 32)
            return
        check_warps(fr, instr, 32, members)
        p = (fr.regs[src] & fr.mask & np.tile(members, len(fr.mask) // 32)).reshape(-1, 32)
        if mode == "ballot":
            bits = (p.astype(np.uint64) << np.arange(32, dtype=np.uint64)).sum(axis=1)
            fr.regs[out] = np.repeat(bits.astype(U32), 32)
            return
        act = (fr.mask & np.tile(members, len(fr.mask) // 32)).reshape(-1, 32)
        count = p.sum(axis=1)
        total = act.sum(axis=1)
        res = {"all": count == total, "any": count > 0,
               "uni": (count == 0) | (count == total)}[mode]
        fr.regs[out] = np.repeat(res, 32)
    return step


@step_rule(ptx_ops.WarpSync)
def _warp_sync(c: TargetCompiler, instr: Instr) -> Step:
    from tessera.interp.target.flow import check_warps

    members = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)

    def step(fr: TargetFrame) -> None:
        warps = np.flatnonzero(check_warps(fr, instr, 32, members))
        sh = fr.m.shared
        if not sh.races or not len(warps) or sh.size == 0:
            return
        # a new race epoch for the accesses of these warps' lanes only
        syncing = np.zeros(fr.m.n // 32 + 1, bool)
        syncing[warps] = True
        w = sh.writer
        mine = (w >= 0) & syncing[np.maximum(w, 0) // 32]
        w[mine] = -1
        lo, hi = sh.rmin, sh.rmax
        read = (hi >= 0) & (lo // 32 == hi // 32) & syncing[np.maximum(hi, 0) // 32]
        lo[read] = np.iinfo(np.int32).max
        hi[read] = -1
    return step


@step_rule(ptx_ops.Elect)
def _elect(c: TargetCompiler, instr: Instr) -> Step:
    from tessera.interp.target.flow import check_warps

    members = ((instr.op.mask >> np.arange(32)) & 1).astype(bool)
    lane_out, pred_out = (c.slot(v) for v in instr.results)

    def step(fr: TargetFrame) -> None:
        check_warps(fr, instr, 32, members)
        act = (fr.mask & np.tile(members, len(fr.mask) // 32)).reshape(-1, 32)
        leader = np.where(act.any(axis=1), act.argmax(axis=1), 0)
        fr.regs[lane_out] = np.repeat(leader, 32).astype(U32)
        fr.regs[pred_out] = (fr.m.tid % 32) == np.repeat(leader, 32)
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
