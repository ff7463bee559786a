"""The end of a kernel with ordered updates: every CTA draws a ticket, and the CTA that
draws the last applies the recorded tensor rows (:mod:`.rows`, in parallel within a
row) and then every tagged slot of the scalar updates (:mod:`.scalar`) in slot order.

The slots' order is one chain of dependent updates, so one thread applies them. The
CTA's threads first stage each chunk of :data:`CHUNK` slots in shared memory (one
coalesced load per thread, the tag cleared for the next launch), so that the applying
thread reads shared memory instead of waiting on a global load per slot. A site of one
destination that no other site may meet keeps its running value in a register for the
whole fold and stores it once, rounded to the memory's format after every update as
the interpreters round; other sites read, update and write their element per slot.

For a block reduction of 16,384 CTAs that is 16,384 slots (one per CTA) in 64 chunks,
where a fold by one thread over global memory would pay a load's latency per slot.
"""

from __future__ import annotations

import numpy as np

from tessera.errors import UnsupportedError
from tessera.ir.core import Value
from tessera.ir.dialects.target import RegType
from tessera.ir.dialects.target.async_ops import Fence
from tessera.ir.dialects.target.ptx_ops import Atom
from tessera.ir.dialects.target.tables import ModuleVar
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.rules.memory import load_scalar, store_scalar, to_mem, to_reg
from tessera.lower.rules.ordered.events import slot_address, updates
from tessera.lower.rules.ordered.rows import RowSite, fold_rows
from tessera.lower.rules.ordered.scalar import Site
from tessera.lower.values import Mem, mem_type, reg_type

#: slots staged in shared memory at a time (one per thread of the folding CTA)
CHUNK = 256


def finish_ordered(low: Lowerer, e: TargetEmitter, tail: bool) -> None:
    """The kernel's end: every CTA draws a ticket, and the last applies the ordered
    sites' slots (see the module docstring); nothing without sites."""
    sites: list[Site] = low.extra.get("ordered", [])
    rows: list[RowSite] = low.extra.get("ordered_rows", [])
    if not sites and not rows:
        return
    if tail:
        raise UnsupportedError("an ordered '+=' of one element in a warp-specialised kernel "
                               "is not lowered", loc=low.fn.loc)
    both = {id(s.root) for s in sites} & {id(r.root) for r in rows}
    if both:
        raise UnsupportedError(
            "a tensor updated both as a tile ('C[...] += tile') and one element at a time, "
            "by tiles of several CTAs, is not ordered on a GPU", loc=low.fn.loc,
            hint="update it one way, or the tile and the elements in two launches")
    g = low.geom
    assert g is not None
    ctas = g.ctas * g.batch
    ticket = low.e.one(ModuleVar(f"__tessera_{low.fn.name}_ord_ticket", 4, 4, restored=True))
    flag = low.shared_buffer("ord_last", 4, 4, entry=True)
    e.bar()  # the CTA's slot writes happen before its thread 0's release

    def arrive(x: TargetEmitter) -> None:
        x.op(Fence("acq_rel_gpu"))  # release this CTA's slots (ordered by bar.sync)
        drawn = x.one(Atom("global", "add", "u32"), ticket, x.const(1, "u32"))
        last = x.setp("eq", drawn, x.const(ctas - 1, "u32"), "u32")
        x.st("shared", flag, x.selp(x.const(1, "u32"), x.const(0, "u32"), last, "u32"),
             "u32")
    e.if_(e.setp("eq", e.sreg("tid.x"), e.const(0, "u32"), "u32"), arrive)
    e.bar()  # thread 0's ticket before every thread's look at it
    last = e.setp("ne", e.ld("shared", flag, "u32"), e.const(0, "u32"), "u32")

    def combine(x: TargetEmitter) -> None:
        x.op(Fence("acq_rel_gpu"))  # acquire every other CTA's records (thread 0's ticket)
        if rows:
            fold_rows(low, x, rows)
        if sites:
            _fold_slots(low, x, sites)
        x.if_(x.setp("eq", x.sreg("tid.x"), x.const(0, "u32"), "u32"),
              lambda y: y.st("global", ticket, y.const(0, "u32"), "u32"))  # for the next launch
    e.if_(last, combine)


def _alone(site: Site, sites: list[Site]) -> bool:
    """Whether ``site`` has one destination that no other site may update."""
    if site.scattered or site.addresses is None:
        return False
    return not any(other is not site and (other.addresses is None or len(
        np.intersect1d(other.addresses, site.addresses, assume_unique=True)) > 0)
        for other in sites)


def _fold_slots(low: Lowerer, x: TargetEmitter, sites: list[Site]) -> None:
    """The last CTA: stage the slots chunk by chunk, thread 0 applies them in order."""
    g, events = low.geom, updates(low).scalar
    assert g is not None
    slots = (g.ctas * g.batch if low.block_kernel else g.launch_threads) * events.per_tile
    chunk = min(g.block, CHUNK)
    tags, values = low.extra["ordered_scratch"]
    dests = low.extra.get("ordered_dests")
    staged = [low.shared_buffer("ord_tags", 4 * chunk, 4, entry=True),
              low.shared_buffer("ord_values", 8 * chunk, 8, entry=True)]
    if dests is not None:
        staged.append(low.shared_buffer("ord_dests", 8 * chunk, 8, entry=True))
    tid = x.sreg("tid.x")
    first = x.setp("eq", tid, x.const(0, "u32"), "u32")
    # the sites' destinations, and the running values of those kept in registers
    where = {s.index: x.ld("global", s.dest, "u64") for s in sites if s.dest is not None}
    kept = [s for s in sites if _alone(s, sites)]
    some = {s.index: x.setp("ne", where[s.index], x.const(0, "u64"), "u64") for s in kept}
    starts = [x.if_(some[s.index], lambda y, s=s: [load_scalar(y, _element(s, where[s.index]))],
                    lambda y, s=s: [y.const(0, s.vtype)], types=[RegType(s.vtype)])[0]
              for s in kept]

    def chunk_body(y: TargetEmitter, c: Value, *accs: Value) -> list[Value]:
        i = y.add(c, y.cvt(tid, "s32", "u32"), "s32")
        sources = [(tags, 4, "u32"), (values, 8, "u64"), (dests, 8, "u64")]

        def stage(z: TargetEmitter) -> None:
            for (base, size, kind), buffer in zip(sources, staged):
                z.st("shared", _shared_at(z, buffer, tid, size),
                     z.ld("global", slot_address(z, base, i, size), kind), kind)
            z.st("global", slot_address(z, tags, i, 4), z.const(0, "u32"), "u32")

        def blank(z: TargetEmitter) -> None:  # no slot: tag 0 (and no unwritten reads)
            for (_, size, kind), buffer in zip(sources, staged):
                z.st("shared", _shared_at(z, buffer, tid, size), z.const(0, kind), kind)
        inside = y.bin("and", y.setp("lt", tid, y.const(chunk, "u32"), "u32"),
                       y.setp("lt", i, y.const(slots, "s32"), "s32"), "pred")
        y.if_(inside, stage, blank)
        y.bar()  # the chunk staged before thread 0 reads it
        out = y.if_(first, lambda z: _apply(z, chunk, staged, sites, kept, where, list(accs)),
                    lambda z: list(accs), types=[RegType(s.vtype) for s in kept])
        y.bar()  # thread 0 done with the chunk before the next is staged
        return out
    totals = x.for_(x.const(0, "s32"), x.const(slots, "s32"), x.const(chunk, "s32"), starts,
                    chunk_body)

    def close(y: TargetEmitter) -> None:
        for s, total in zip(kept, totals):
            y.if_(some[s.index], lambda z, s=s, total=total:
                  store_scalar(z, _element(s, where[s.index]), total, s.vtype))
        for s in sites:
            if s.dest is not None:
                y.st("global", s.dest, y.const(0, "u64"), "u64")
    x.if_(first, close)


def _apply(e: TargetEmitter, chunk: int, staged: list[Value], sites: list[Site],
           kept: list[Site], where: dict[int, Value], accs: list[Value]) -> list[Value]:
    """Thread 0 applies a staged chunk in slot order: ``*dest = *dest <name> value``
    for each tagged slot, the running values of ``kept`` sites in registers."""
    def body(y: TargetEmitter, j: Value, *running: Value) -> list[Value]:
        ju = y.cvt(j, "u32", "s32")
        tag = y.ld("shared", _shared_at(y, staged[0], ju, 4), "u32")
        value_at = _shared_at(y, staged[1], ju, 8)
        out = list(running)
        for s in sites:
            on = y.setp("eq", tag, y.const(s.index + 1, "u32"), "u32")
            v = y.ld("shared", value_at, s.vtype)
            if s in kept:
                k = kept.index(s)
                out[k] = y.selp(_rounded(y, s, y.bin(s.name, running[k], v, s.vtype)),
                                running[k], on, s.vtype)
                continue

            def update(z: TargetEmitter, s: Site = s, v: Value = v) -> None:
                dest = where.get(s.index)
                if dest is None:
                    dest = z.ld("shared", _shared_at(z, staged[2], ju, 8), "u64")
                at = _element(s, dest)
                store_scalar(z, at, z.bin(s.name, load_scalar(z, at), v, s.vtype), s.vtype)
            y.if_(on, update)
        return out
    return e.for_(e.const(0, "s32"), e.const(chunk, "s32"), e.const(1, "s32"), accs, body)


def _rounded(e: TargetEmitter, site: Site, value: Value) -> Value:
    """``value`` rounded to the site's memory format (as a store and reload would)."""
    mt, element = mem_type(site.mem.element), site.mem.element
    if mt == site.vtype:
        return value
    return to_reg(e, to_mem(e, value, site.vtype, mt, element), mt, reg_type(element), element)


def _element(site: Site, addr: Value) -> Mem:
    """The site's element at the global address ``addr``."""
    return Mem("global", addr, None, (), (), site.mem.element)


def _shared_at(e: TargetEmitter, base: Value, index: Value, size: int) -> Value:
    """``base + index * size`` (a shared address) for a ``u32`` index."""
    return e.add(base, e.mul(index, e.const(size, "u32"), "u32"), "u32")


__all__ = ["CHUNK", "finish_ordered"]
