"""Rules for the memory instructions of :mod:`tessera.ir.dialects.target.ptx_ops`:
``ld.param``, ``cvta``, generic and byte ``ld``/``st``, ``atom`` and ``stmatrix``.

Generic addresses: global buffers are at their own addresses (``cvta.global`` is the
identity), the CTA's shared memory at ``SHARED_WINDOW`` and the kernel's parameter
space at ``PARAM_WINDOW``. Atomics apply in linear thread order (the CTAs in the
launch's ``cta_order``) and return the value each thread saw.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.arch.cluster import CLUSTER_SPAN
from tessera.interp.target.memory.atomics import apply_in_order, arrival, check_shared
from tessera.interp.target.memory.global_memory import check_aligned
from tessera.interp.target.memory.steps import to_bytes
from tessera.interp.target.ordering import strong
from tessera.interp.target.regs import pure
from tessera.interp.target.state import DTYPES, Step, TargetCompiler, TargetFrame, narrow, step_rule
from tessera.ir.core import Instr
from tessera.ir.dialects.target import ptx_ops

U64 = np.dtype(np.uint64)


class LocalMemory:
    """Each thread's ``.local`` memory (``size`` bytes, the kernel's ``.local``
    variables); reading a byte the thread never wrote is an error."""

    def __init__(self, n: int, size: int) -> None:
        self.size = size
        self.data = np.zeros((n, max(size, 1)), np.uint8)
        self.init = np.zeros((n, max(size, 1)), bool)

    def access(self, who: np.ndarray, addr: np.ndarray, nbytes: int,
               data: np.ndarray | None, fail: Any) -> np.ndarray:
        """Bytes (M, nbytes) at local ``addr`` of threads ``who``, or store ``data``."""
        bad = (addr < 0) | (addr + nbytes > self.size)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            fail(k, "out of bounds", f"local access of {nbytes} bytes at local address "
                 f"{int(addr[k])}; the thread has {self.size} bytes of local memory")
        mis = addr % nbytes != 0
        if mis.any():
            k = int(np.flatnonzero(mis)[0])
            fail(k, "misaligned address", f"local access of {nbytes} bytes at local "
                 f"address {int(addr[k])} is not {nbytes}-byte aligned")
        cols = addr[:, None] + np.arange(nbytes)
        rows = who[:, None]
        if data is not None:
            self.data[rows, cols] = data
            self.init[rows, cols] = True
            return data
        ok = self.init[rows, cols]
        if not ok.all():
            k = int(np.flatnonzero(~ok.all(axis=1))[0])
            fail(k, "uninitialised local read", f"local byte {int(cols[k][~ok[k]][0])} "
                 "was never written by this thread")
        return self.data[rows, cols]


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
    base = {"global": 0, "const": 0, "shared": ptx_ops.SHARED_WINDOW, "local": ptx_ops.LOCAL_WINDOW,
            "param": ptx_ops.PARAM_WINDOW}[op.space]
    delta = np.uint64(base)
    if op.to:
        return pure(c, instr, lambda a: (a - delta).astype(U64))
    return pure(c, instr, lambda a: (a + delta).astype(U64))


def _split(fr: TargetFrame, addr: np.ndarray, act: np.ndarray) -> np.ndarray:
    """Which of the active threads' generic addresses lie in the shared window: shared
    addresses 0 up to the CTA's last byte (the reserved kilobyte below its first byte
    included, where an access faults as out of bounds), and in a cluster the windows of
    its other CTAs' memory."""
    sh = fr.m.shared
    end = CLUSTER_SPAN if sh.cluster_size > 1 else sh.base + max(sh.size, 1)
    a = addr.astype(np.int64)
    return (a >= ptx_ops.SHARED_WINDOW) & (a < ptx_ops.SHARED_WINDOW + end)


def _param_bytes(fr: TargetFrame, instr: Instr, off: np.ndarray, who: np.ndarray,
                 nbytes: int, store: bool) -> np.ndarray:
    """The kernel parameter bytes (M, nbytes) at parameter-space offsets ``off``: a
    struct passed by value is read through its address (``mov`` of the parameter's
    name, or ``cvta.param``). The parameter space is read-only."""
    m: Any = fr.m
    params = getattr(m, "params", np.zeros(0, np.uint8))
    fail = m.failer(instr, who)
    if store:
        fail(0, "read-only memory", f"a store of {nbytes} bytes to the kernel's parameter "
             f"space (offset {int(off[0])}): kernel parameters are read-only")
    bad = off + nbytes > params.size
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        fail(k, "out of bounds", f"a read of {nbytes} bytes at parameter offset "
             f"{int(off[k])}: the kernel's parameters take {params.size} bytes")
    check_aligned(off, nbytes, fail, lambda x: f"a read of {nbytes} bytes at parameter "
                  f"offset {x}")
    return params[off[:, None] + np.arange(nbytes)]


def generic_access(fr: TargetFrame, instr: Instr, addr: np.ndarray, act: np.ndarray,
                   nbytes: int, data: np.ndarray | None = None,
                   cluster: bool = True) -> np.ndarray:
    """Read (``data`` None: the bytes (M, nbytes)) or write ``data`` at the generic
    addresses of the active threads ``act``: the local window is each thread's own
    local memory, the shared window its CTA's shared memory (and, in a cluster, the
    others' through their cluster addresses; ``cluster`` False: a ``.shared::cta``
    access, which may not), the rest global memory. The access has the memory order
    of ``instr``'s op (:mod:`tessera.interp.target.ordering.strong`)."""
    order = getattr(instr.op, "order", "")
    m: Any = fr.m
    out = np.zeros((len(act), nbytes), np.uint8)
    a = addr.astype(np.int64)
    local = getattr(m, "local", None)
    in_local = (a >= ptx_ops.LOCAL_WINDOW) & (a < ptx_ops.LOCAL_WINDOW + (
        local.size if local is not None else 0))
    sh = _split(fr, a, act) & ~in_local
    in_param = (a >= ptx_ops.PARAM_WINDOW) & (a < ptx_ops.SHARED_WINDOW)
    if in_param.any():
        out[in_param] = _param_bytes(fr, instr, a[in_param] - ptx_ops.PARAM_WINDOW,
                                     act[in_param], nbytes, data is not None)
    rest = ~(sh | in_local | in_param)
    if rest.any():
        fail = m.failer(instr, act[rest])
        if data is None:
            out[rest] = m.glob.read(a[rest], nbytes, fail)
        else:
            m.glob.write(a[rest], data[rest], fail)
    if sh.any():
        who = act[sh]
        fail = m.failer(instr, who)
        flat = m.shared.index(m.cta[who], a[sh] - ptx_ops.SHARED_WINDOW, nbytes, fail,
                              cluster=cluster)
        if data is None:
            out[sh] = strong.load(m, flat, who, fail, order)
        else:
            strong.store(m, flat, data[sh], who, fail, order)
    if in_local.any():
        who = act[in_local]
        res = local.access(who, a[in_local] - ptx_ops.LOCAL_WINDOW, nbytes,
                           None if data is None else data[in_local], m.failer(instr, who))
        if data is None:
            out[in_local] = res
    return out


@step_rule(ptx_ops.GenericLoad)
def _generic_load(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    a = c.slot(instr.operands[0])
    out = c.slot(instr.results[0])
    dt = DTYPES[op.type]
    size = dt.itemsize * op.vec
    shape: tuple[int, ...] = (c.m.n,) if op.vec == 1 else (c.m.n, op.vec)

    def step(fr: TargetFrame) -> None:
        act = np.flatnonzero(fr.mask)
        addr = fr.regs[a][act].astype(np.int64) + op.offset
        raw = generic_access(fr, instr, addr, act, size)
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
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        addr = fr.regs[a][act].astype(np.int64) + op.offset
        data = to_bytes(narrow(fr.regs[v][act], op.type).astype(dt), len(act))
        generic_access(fr, instr, addr, act, size, data)
    return step


@step_rule(ptx_ops.Atom)
def _atom(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    slots = [c.slot(x) for x in instr.operands]
    out = c.slot(instr.results[0])
    dt, vec = DTYPES[op.type], op.vec
    size = dt.itemsize

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if op.space != "shared":  # those of different CTAs meet in global memory or a
            act = arrival(m, act)  # cluster's shared memory: they land in CTA order
        result = np.zeros((m.n, vec), dt)
        if len(act):
            addr = fr.regs[slots[0]][act].astype(np.int64)
            b = narrow(fr.regs[slots[1]][act], op.type).astype(dt).reshape(len(act), vec)
            cmp = None
            if op.op == "cas":
                cmp, b = b[:, 0], fr.regs[slots[2]][act].astype(dt).reshape(len(act), 1)
            shared = (np.ones(len(act), bool) if op.space.startswith("shared") else
                      np.zeros(len(act), bool) if op.space == "global"
                      else _split(fr, addr, act))
            if op.space == "" and shared.any():
                if vec > 1:  # sm_90's vector atomics update global memory only
                    raise m.fault(instr, "atomic", f"a vector atom.v{vec} at a generic "
                                  "address of shared memory: it updates global memory only",
                                  int(act[shared][0]))
                addr = np.where(shared, addr - ptx_ops.SHARED_WINDOW, addr)
            olds = np.zeros((len(act), vec), dt)
            with np.errstate(all="ignore"):
                if (~shared).any():
                    sel = np.flatnonzero(~shared)
                    fail = m.failer(instr, act[sel])
                    # bounds and alignment of the whole vector; then each element in turn
                    k, off = m.glob.resolve(addr[sel], size * vec, fail, "atomic")
                    for buf in np.unique(k):
                        part = k == buf
                        raw = m.glob.bytes[buf]
                        view = raw[: raw.size // size * size].view(dt)
                        for j in range(vec):
                            olds[sel[part], j] = apply_in_order(
                                view, off[part] // size + j, op.op, b[sel[part], j],
                                None if cmp is None else cmp[sel[part]], op.type)
                if shared.any():
                    sel = np.flatnonzero(shared)
                    who = act[sel]
                    fail = m.failer(instr, who)
                    flat = m.shared.index(m.cta[who], addr[sel], size, fail,
                                          cluster=op.space != "shared")
                    strong.atomic(m, flat, who, op.order)
                    check_shared(m.shared, flat, who, fail)
                    olds[sel, 0] = apply_in_order(m.shared.data.view(dt), flat[:, 0] // size,
                                                  op.op, b[sel, 0],
                                                  None if cmp is None else cmp[sel], op.type)
            result[act] = olds
        fr.regs[out] = result[:, 0] if vec == 1 else result
    return step


def _byte_access(fr: TargetFrame, instr: Instr, space: str, addr: np.ndarray,
                 act: np.ndarray, nbytes: int, data: np.ndarray | None) -> np.ndarray:
    """Read (``data`` None: the bytes (M, nbytes)) or write ``nbytes`` bytes per active
    thread in ``space``, checked byte by byte (bounds, alignment to ``nbytes``)."""
    if space == "global":
        fail = fr.m.failer(instr, act)
        if data is None:
            return fr.m.glob.read(addr, nbytes, fail)
        fr.m.glob.write(addr, data, fail)
        return data
    if space.startswith("shared"):
        addr = addr + ptx_ops.SHARED_WINDOW
    return generic_access(fr, instr, addr, act, nbytes, data, cluster=space != "shared")


@step_rule(ptx_ops.ByteLoad)
def _byte_load(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    a = c.slot(instr.operands[0])
    out = c.slot(instr.results[0])
    shape: tuple[int, ...] = (c.m.n,) if op.vec == 1 else (c.m.n, op.vec)

    def step(fr: TargetFrame) -> None:
        act = np.flatnonzero(fr.mask)
        addr = fr.regs[a][act].astype(np.int64) + op.offset
        raw = _byte_access(fr, instr, op.space, addr, act, op.vec, None)
        values = np.zeros(shape, np.int32 if op.signed else np.uint32)
        values[act] = (raw.view(np.int8) if op.signed else raw).reshape(
            (len(act), *shape[1:]))
        fr.regs[out] = values
    return step


@step_rule(ptx_ops.ByteStore)
def _byte_store(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    a, v = (c.slot(x) for x in instr.operands)

    def step(fr: TargetFrame) -> None:
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        addr = fr.regs[a][act].astype(np.int64) + op.offset
        regs = fr.regs[v][act].astype(np.int64).reshape(len(act), op.vec)
        _byte_access(fr, instr, op.space, addr, act, op.vec, (regs & 0xFF).astype(np.uint8))
    return step


@step_rule(ptx_ops.Stmatrix)
def _stmatrix(c: TargetCompiler, instr: Instr) -> Step:
    from tessera.interp.target.flow import check_warps

    num, trans = instr.op.num, instr.op.trans
    a, v = (c.slot(x) for x in instr.operands)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        warps = np.flatnonzero(check_warps(fr, instr))
        if not len(warps):
            return
        lanes = warps[:, None] * 32 + np.arange(32)
        regs = fr.regs[v][lanes].astype(np.uint32)  # (W, 32, num)
        lane = np.arange(32)
        mats = np.zeros((len(warps), num, 8, 8), np.uint16)
        for k in range(num):  # register k of lane l: row l/4, columns 2(l%4), +1
            mats[:, k, lane >> 2, 2 * (lane & 3)] = regs[:, :, k] & np.uint32(0xFFFF)
            mats[:, k, lane >> 2, 2 * (lane & 3) + 1] = regs[:, :, k] >> np.uint32(16)
        if trans:
            mats = np.swapaxes(mats, -1, -2)
        rows = lanes[:, : 8 * num].ravel()  # the lanes that give row addresses
        fail = m.failer(instr, rows)
        addr = fr.regs[a][rows].astype(np.int64) + instr.op.offset
        flat = m.shared.index(m.cta[rows], addr, 16, fail)
        data = np.ascontiguousarray(mats.reshape(-1, 8)).view(np.uint8)
        m.shared.write(flat, data, rows, fail)
    return step


__all__: list[str] = []
