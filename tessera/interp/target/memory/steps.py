"""``ld``, ``st``, ``red`` and ``.shared`` buffers (PTX ISA, "ld", "st",
"red"), acting on the active threads only; the guarded ``@%p ld``/``@%p st`` of
:mod:`tessera.ir.dialects.target.guarded` act on the active threads whose guard is true.

A store of several threads to one address keeps the highest thread's value (PTX leaves
the winner unspecified). ``red`` applies the updates one at a time in linear thread
order (CTA order first, see :mod:`tessera.ir.dialects.target.ops`; all of them in reverse
under ``run_target(..., cta_order="descending")``), each as
:func:`tessera.interp.target.memory.atomics.updated` defines it.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import UnsupportedError
from tessera.interp.target.memory.atomics import apply_in_order, arrival, check_shared
from tessera.interp.target.ordering import strong
from tessera.interp.target.state import (
    DTYPES,
    Step,
    TargetCompiler,
    TargetFrame,
    narrow,
    step_rule,
)
from tessera.ir.core import Instr
from tessera.ir.dialects.target import guarded as target_guarded
from tessera.ir.dialects.target import ops as target_ops


def _address(fr: TargetFrame, slot: int, act: np.ndarray, offset: int) -> np.ndarray:
    return fr.regs[slot][act].astype(np.int64) + offset


def to_bytes(values: np.ndarray, m: int) -> np.ndarray:
    """Register values (M,) or (M, k) as their little-endian bytes (M, nbytes)."""
    return np.ascontiguousarray(values).reshape(m, -1).view(np.uint8)


@step_rule(target_ops.SharedAlloc)
def _shared(c: TargetCompiler, instr: Instr) -> Step:
    value = np.full(c.m.n, c.m.shared_layout[instr.op.sym], np.uint32)
    out = c.slot(instr.results[0])

    def step(fr: TargetFrame) -> None:
        fr.regs[out] = value
    return step


@step_rule(target_ops.Load)
def _load(c: TargetCompiler, instr: Instr) -> Step:
    return load_step(c, instr, guarded=False)


@step_rule(target_ops.Store)
def _store(c: TargetCompiler, instr: Instr) -> Step:
    return store_step(c, instr, guarded=False)


@step_rule(target_guarded.GuardedLoad)
def _guarded_load(c: TargetCompiler, instr: Instr) -> Step:
    return load_step(c, instr, guarded=True)


@step_rule(target_guarded.GuardedStore)
def _guarded_store(c: TargetCompiler, instr: Instr) -> Step:
    return store_step(c, instr, guarded=True)


#: the state spaces of ld, st and red; ``shared::cluster`` also reaches the shared memory
#: of the other CTAs of the thread's cluster
SPACES = ("global", "shared", "shared::cluster")


def load_step(c: TargetCompiler, instr: Instr, *, guarded: bool) -> Step:
    """``ld`` by the active threads; ``guarded`` (``@%p ld``, operands address, guard,
    other): only where the guard is true, ``other`` elsewhere (sec. 9.3.1)."""
    op = instr.op
    if op.space not in SPACES:
        raise UnsupportedError(f"ld.{op.space} is not modelled; kernel parameters are block "
                               "arguments", loc=instr.loc)
    order = getattr(op, "order", "")  # guarded loads are weak
    cluster = op.space == "shared::cluster"
    a = c.slot(instr.operands[0])
    guard, other = ((c.slot(instr.operands[1]), c.slot(instr.operands[2])) if guarded
                    else (None, None))
    out = c.slot(instr.results[0])
    dt = DTYPES[op.type]
    size = dt.itemsize * op.vec
    shape: tuple[int, ...] = (c.m.n,) if op.vec == 1 else (c.m.n, op.vec)

    def step(fr: TargetFrame) -> None:
        m = fr.m
        on = fr.mask if guard is None else fr.mask & fr.regs[guard].astype(bool)
        act = np.flatnonzero(on)
        values = (np.zeros(shape, dt) if other is None else
                  np.array(np.broadcast_to(fr.regs[other], shape), dt))
        if len(act):
            addr = _address(fr, a, act, op.offset)
            fail = m.failer(instr, act)
            if op.space == "global":
                raw = m.glob.read(addr, size, fail)
            else:
                flat = m.shared.index(m.cta[act], addr, size, fail, cluster=cluster)
                raw = strong.load(m, flat, act, fail, order)
            values[act] = raw.view(dt).reshape((len(act), *shape[1:]))
        fr.regs[out] = values
    return step


def store_step(c: TargetCompiler, instr: Instr, *, guarded: bool) -> Step:
    """``st`` by the active threads; ``guarded`` (``@%p st``, operands address, value,
    guard): only where the guard is true."""
    op = instr.op
    if op.space not in SPACES:
        raise UnsupportedError(f"st.{op.space} is not modelled", loc=instr.loc)
    order = getattr(op, "order", "")
    cluster = op.space == "shared::cluster"
    a, v = c.slot(instr.operands[0]), c.slot(instr.operands[1])
    guard = c.slot(instr.operands[2]) if guarded else None
    dt = DTYPES[op.type]
    size = dt.itemsize * op.vec

    def step(fr: TargetFrame) -> None:
        m = fr.m
        on = fr.mask if guard is None else fr.mask & fr.regs[guard].astype(bool)
        act = np.flatnonzero(on)
        if not len(act):
            return
        addr = _address(fr, a, act, op.offset)
        data = to_bytes(narrow(fr.regs[v][act], op.type).astype(dt), len(act))
        fail = m.failer(instr, act)
        if op.space == "global":
            m.glob.write(addr, data, fail)
        else:
            flat = m.shared.index(m.cta[act], addr, size, fail, cluster=cluster)
            strong.store(m, flat, data, act, fail, order, consecutive=True)
    return step


@step_rule(target_ops.Reduce)
def _reduce(c: TargetCompiler, instr: Instr) -> Step:
    op = instr.op
    if op.space not in SPACES:
        raise UnsupportedError(f"red.{op.space}.{op.op} is not modelled", loc=instr.loc)
    cluster = op.space == "shared::cluster"
    a, v = (c.slot(x) for x in instr.operands)
    dt = DTYPES[op.type]

    def step(fr: TargetFrame) -> None:
        m = fr.m
        act = np.flatnonzero(fr.mask)
        if not len(act):
            return
        if op.space != "shared":  # those of different CTAs meet in global memory or a
            act = arrival(m, act)  # cluster's shared memory: they land in CTA order
        addr = _address(fr, a, act, 0)
        vals = narrow(fr.regs[v][act], op.type).astype(dt)
        fail = m.failer(instr, act)
        with np.errstate(all="ignore"):
            if op.space == "global":
                k, off = m.glob.resolve(addr, dt.itemsize, fail, "atomic")
                for b in np.unique(k):
                    sel = k == b
                    raw = m.glob.bytes[b]
                    view = raw[: raw.size // dt.itemsize * dt.itemsize].view(dt)
                    apply_in_order(view, off[sel] // dt.itemsize, op.op, vals[sel],
                                   elem=op.type)
            else:
                flat = m.shared.index(m.cta[act], addr, dt.itemsize, fail, cluster=cluster)
                strong.atomic(m, flat, act, op.order)
                check_shared(m.shared, flat, act, fail)
                apply_in_order(m.shared.data.view(dt), flat[:, 0] // dt.itemsize, op.op, vals,
                               elem=op.type)
    return step


__all__ = ["to_bytes"]
