"""Updates of one global element from several tiles, applied in tile order on a GPU.

``total[0] += x`` from several tiles is applied in tile (group, then local id) order
by the tile interpreter and the Target IR interpreter (DECISIONS.md: accumulated
across tiles in a fixed order). A float add is not associative, so the bits depend
on that order, and ``red.global.add.f32`` lands in whatever order the CTAs' atomics
arrive. This module keeps the order on a GPU with the *last CTA combines* scheme:

* at the update, each thread writes its value to a slot of its own, numbered in
  linear thread order (``(ctaid.y * nctaid.x + ctaid.x) * ntid.x + tid.x``), raises
  the slot's flag and records the destination's address;
* at the kernel's end every CTA meets at ``bar.sync``; its thread 0 releases the
  CTA's writes (``fence.acq_rel.gpu``: cumulative over what the barrier ordered) and
  draws a ticket with ``atom.global.add.u32``. The CTA that draws the last ticket
  acquires (``fence.acq_rel.gpu``), folds the flagged slots into the destination in
  slot order, rounding to the destination's format after each, as the interpreters
  do, clears the flags and the recorded address and puts the ticket back to 0.

The scratch (slots, flags, the ticket) is module-scope ``.global`` variables
(``ptx.module_var``), zero when the module loads and restored to zero by the kernel,
so the launch ABI, AOT bundles and CUDA graphs are unchanged. No CTA waits for another
(no spin, no forward-progress assumption), which also lets the lockstep Target IR
interpreter run the scheme as it is. Two launches of one kernel running at once (two
streams) would share the scratch: such launches are not ordered anyway.

The other known scheme, an ordered semaphore (each CTA spins until it is its turn),
needs no scratch but assumes CTAs are dispatched in index order, and a spin for a
later CTA cannot run in an interpreter that runs the CTAs in lockstep.

The scheme covers an update that each thread runs at most once (it is in no loop), in
a launch of at most :data:`MAX_SLOTS` threads, whose element is the same for every
thread (its address depends only on kernel parameters and constants) or is known per
thread while compiling (``bins[i % B]``: the address is evaluated for every thread by
:mod:`tessera.lower.rules.cta_values`). In the second case each slot keeps its own
destination, and the last CTA applies the slots one by one in slot order; where no two
threads share an element, the update is a plain read-modify-write and needs no
scratch. Sites that may meet (their evaluated addresses intersect) are applied slot by
slot, each slot's sites in program order, as each tile runs them. An element that
depends on loaded data (``bins[key[i]]``) keeps ``red.global.add``, and the bits of a
GPU run may then differ from the interpreters' in the last places. Integer add, min
and max stay ``red``: they are associative and commutative, so the arrival order
cannot change the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.errors import UnsupportedError
from tessera.ir.core import Block, Function, Instr, Value, walk
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.async_ops import Fence
from tessera.ir.dialects.target.ptx_ops import Atom
from tessera.ir.dialects.target.tables import ModuleVar
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.ir.structured import StructuredFor, StructuredWhile
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.rules.cta_values import distinct, launch_values, thread_values
from tessera.lower.values import Mem, mem_type, reg_type

#: register types whose values the slots hold, by their size in bytes
SLOT_TYPES = {"f32": 4, "s32": 4, "f64": 8}
#: the most threads a launch may have for the scheme: each has a slot (and one thread
#: reads them all), so a larger launch keeps ``red``
MAX_SLOTS = 1 << 22
#: special registers with one value in the whole grid
_UNIFORM_SREGS = {"ntid.x", "ntid.y", "ntid.z", "nctaid.x", "nctaid.y", "nctaid.z"}
_PURE = (target_ops.Const, target_ops.Binary, target_ops.Unary, target_ops.Cvt,
         target_ops.Setp, target_ops.Selp, target_ops.Fma)


def _looped(fn: Function) -> set[int]:
    """Ids of the ``tile.update`` instructions inside a loop of ``fn``."""
    found: set[int] = set()

    def visit(block: Block, inside: bool) -> None:
        for instr in block.instrs:
            if inside and isinstance(instr.op, tile_memory.Update):
                found.add(id(instr))
            loop = inside or isinstance(instr.op, (StructuredFor, StructuredWhile))
            for region in instr.regions:
                for b in region.blocks:
                    visit(b, loop)
    visit(fn.body, False)
    return found


def _uniform(v: Value, params: list[Value], depth: int = 0) -> bool:
    """Whether ``v`` is the same in every thread of the grid: computed by pure
    instructions from kernel parameters, constants and the launch's sizes."""
    if depth > 64:
        return False
    owner = v.owner
    if not isinstance(owner, Instr):
        return any(v is p for p in params)
    op = owner.op
    if isinstance(op, target_ops.Special):
        return op.reg in _UNIFORM_SREGS
    return isinstance(op, _PURE) and all(_uniform(x, params, depth + 1)
                                         for x in owner.operands)


def ordered_update(low: Lowerer, e: TargetEmitter, instr: Instr, addr: Value, value: Value,
                   vtype: str, name: str, mem: Mem) -> str:
    """This thread's update ``mem = mem <name> value`` (at ``addr``): ``"ordered"`` where
    it is recorded for the ordered combine at the kernel's end; ``"own"`` where each
    thread's element is its own (nothing emitted: a plain read-modify-write is exact);
    ``"unordered"`` (nothing emitted) where the scheme does not apply: an element the
    compiler cannot tell apart (it depends on loaded data), an update in a loop, a
    value type the slots do not hold, a launch of more than :data:`MAX_SLOTS`
    threads."""
    if "looped_updates" not in low.extra:
        low.extra["looped_updates"] = _looped(low.fn)
    assert low.geom is not None
    n = low.geom.launch_threads
    if vtype not in SLOT_TYPES or id(instr) in low.extra["looped_updates"] or n > MAX_SLOTS:
        return "unordered"
    scattered = not _uniform(addr, low.params)
    g = low.geom  # a block kernel's scalar update runs once per CTA (by its thread 0)
    at = thread_values(g.ctas, g.batch, g.block, low.params, addr) if scattered and \
        not low.block_kernel else launch_values(g.ctas, g.batch, g.block, low.params)(addr)
    addresses = None if at is None else distinct(at)
    if scattered:
        writers = _writers(low, at, addresses)
        if writers != "shared":
            return writers
    size = SLOT_TYPES[vtype]
    sites: list[Site] = low.extra.setdefault("ordered", [])
    tag = f"__tessera_{low.fn.name}_ord{len(sites)}"
    entry = low.e  # the entry block dominates the kernel's end, where the slots are read
    flags = entry.one(ModuleVar(f"{tag}_flags", 4 * n, 4, restored=True))
    slots = entry.one(ModuleVar(f"{tag}_slots", size * n, size))
    # one destination for the whole site, or one per slot where the element differs
    dest = entry.one(ModuleVar(f"{tag}_dest", 8 * n if scattered else 8, 8, restored=True))
    sites.append(Site(flags, slots, dest, scattered, name, vtype, mem, addresses))
    i = _slot_index(low)
    e.st("global", _at(e, dest, i, 8) if scattered else dest, addr, "u64")
    e.st("global", _at(e, slots, i, size), value, vtype)
    e.st("global", _at(e, flags, i, 4), e.const(1, "u32"), "u32")
    return "ordered"


@dataclass(frozen=True, eq=False)
class Site:
    """An ordered update's scratch (flags, slots, destination addresses), its update,
    and the addresses it may update (evaluated while compiling; None if unknown)."""

    flags: Value
    slots: Value
    dest: Value
    scattered: bool  # a destination per slot
    name: str
    vtype: str
    mem: Mem
    addresses: np.ndarray | None


def _writers(low: Lowerer, at: np.ndarray | None, addresses: np.ndarray | None) -> str:
    """Whether the threads that may update the addresses ``at`` (one per thread; the
    distinct ones ``addresses``) each have their own element (``"own"``), share some
    (``"shared"``), or cannot be told apart while compiling (``"unordered"``). Elements
    are only one thread's where the kernel has no other update (another site's thread
    could meet this one's element)."""
    if at is None or addresses is None:
        return "unordered"
    if "updates" not in low.extra:
        low.extra["updates"] = sum(isinstance(i.op, tile_memory.Update) for i in walk(low.fn.body))
    alone = low.extra["updates"] == 1
    return "own" if alone and len(addresses) == len(at) else "shared"


def _slot_index(low: Lowerer) -> Value:
    """This thread's linear index in the grid (computed once, in the entry block)."""
    if "ordered_slot" not in low.extra:
        e, g = low.e, low.geom
        assert g is not None
        cta = e.add(e.mul(e.cvt(e.sreg("ctaid.y"), "s32", "u32"), e.const(g.ctas, "s32"),
                          "s32"), e.cvt(e.sreg("ctaid.x"), "s32", "u32"), "s32")
        tid = e.cvt(e.sreg("tid.x"), "s32", "u32")
        low.extra["ordered_slot"] = e.add(e.mul(cta, e.const(g.block, "s32"), "s32"), tid,
                                          "s32")
    return low.extra["ordered_slot"]


def _at(e: TargetEmitter, base: Value, index: Value, size: int) -> Value:
    """``base + index * size`` (a global address)."""
    wide = e.bin("mul", index, e.const(size, "s32"), "s32", "wide")
    return e.add(base, e.cvt(wide, "u64", "s64"), "u64")


def finish_ordered(low: Lowerer, e: TargetEmitter, tail: bool) -> None:
    """The kernel's end: the last CTA to arrive folds every ordered site's slots into
    its destination in slot order (see the module docstring); nothing without sites."""
    sites = low.extra.get("ordered")
    if not sites:
        return
    if tail:
        raise UnsupportedError("an ordered '+=' of one element in a warp-specialised kernel "
                               "is not lowered", loc=low.fn.loc)
    g = low.geom
    assert g is not None
    n, ctas = g.launch_threads, g.ctas * g.batch
    ticket = low.e.one(ModuleVar(f"__tessera_{low.fn.name}_ord_ticket", 4, 4, restored=True))
    e.bar()  # the CTA's slot writes happen before its thread 0's release
    first = e.setp("eq", e.sreg("tid.x"), e.const(0, "u32"), "u32")

    def combine(inner: TargetEmitter) -> None:
        inner.op(Fence("acq_rel_gpu"))  # acquire every other CTA's slots
        for cluster in _clusters(sites):
            if len(cluster) > 1 or cluster[0].scattered:
                _fold_in_turn(inner, n, cluster)
                continue
            (site,) = cluster
            addr = inner.ld("global", site.dest, "u64")
            some = inner.setp("ne", addr, inner.const(0, "u64"), "u64")
            inner.if_(some, lambda x, s=site, a=addr: _fold(x, n, a, s))
        inner.st("global", ticket, inner.const(0, "u32"), "u32")  # for the next launch

    def arrive(inner: TargetEmitter) -> None:
        inner.op(Fence("acq_rel_gpu"))  # release this CTA's slots (ordered by bar.sync)
        drawn = inner.one(Atom("global", "add", "u32"), ticket, inner.const(1, "u32"))
        last = inner.setp("eq", drawn, inner.const(ctas - 1, "u32"), "u32")
        inner.if_(last, combine)
    e.if_(first, arrive)


def _fold(e: TargetEmitter, n: int, addr: Value, site: Site) -> None:
    """``*addr = *addr <name> slot[i]`` for each flagged slot i in order, rounded to
    the memory's format after each update; clears the flags and the destination."""
    from tessera.lower.rules.memory import load_scalar, to_mem, to_reg

    mem, vtype = site.mem, site.vtype
    mt, size = mem_type(mem.element), SLOT_TYPES[vtype]
    start = load_scalar(e, Mem("global", addr, None, (), (), mem.element))

    def body(inner: TargetEmitter, i: Value, acc: Value) -> list[Value]:
        flag = _at(inner, site.flags, i, 4)
        on = inner.setp("ne", inner.ld("global", flag, "u32"), inner.const(0, "u32"), "u32")
        v = inner.ld("global", _at(inner, site.slots, i, size), vtype)
        new = inner.bin(site.name, acc, v, vtype)
        if mt != vtype:  # the memory's own format after every update
            new = to_reg(inner, to_mem(inner, new, vtype, mt, mem.element), mt,
                         reg_type(mem.element), mem.element)
        inner.st("global", flag, inner.const(0, "u32"), "u32")
        return [inner.selp(new, acc, on, vtype)]
    (total,) = e.for_(e.const(0, "s32"), e.const(n, "s32"), e.const(1, "s32"), [start], body)
    e.st("global", addr, to_mem(e, total, vtype, mt, mem.element), mt)
    e.st("global", site.dest, e.const(0, "u64"), "u64")


def _clusters(sites: list[Site]) -> list[list[Site]]:
    """The sites in groups that may update a common element (an unknown address meets
    every site), each in program order: a group folds slot by slot, site by site."""
    groups: list[list[Site]] = []
    for site in sites:
        meets = [g for g in groups if any(_meet(site, other) for other in g)]
        merged = [s for g in meets for s in g] + [site]
        groups = [g for g in groups if g not in meets] + [merged]
    order = {id(s): k for k, s in enumerate(sites)}
    return [sorted(g, key=lambda s: order[id(s)]) for g in groups]


def _meet(a: Site, b: Site) -> bool:
    if a.addresses is None or b.addresses is None:
        return True
    return len(np.intersect1d(a.addresses, b.addresses, assume_unique=True)) > 0


def _fold_in_turn(e: TargetEmitter, n: int, sites: list[Site]) -> None:
    """For each slot i in order, each site's flagged update in program order:
    ``*dest = *dest <name> slot[i]``, stored in the memory's format (rounded after
    each update), as a tile runs its updates; clears the flags and the addresses."""
    from tessera.lower.rules.memory import load_scalar, store_scalar

    def body(inner: TargetEmitter, i: Value) -> None:
        for site in sites:
            flag, size = _at(inner, site.flags, i, 4), SLOT_TYPES[site.vtype]

            def apply(x: TargetEmitter, site: Site = site, flag: Value = flag,
                      size: int = size) -> None:
                where = _at(x, site.dest, i, 8) if site.scattered else site.dest
                at = Mem("global", x.ld("global", where, "u64"), None, (), (),
                         site.mem.element)
                v = x.ld("global", _at(x, site.slots, i, size), site.vtype)
                store_scalar(x, at, x.bin(site.name, load_scalar(x, at), v, site.vtype),
                             site.vtype)
                x.st("global", flag, x.const(0, "u32"), "u32")
                if site.scattered:
                    x.st("global", where, x.const(0, "u64"), "u64")
            on = inner.setp("ne", inner.ld("global", flag, "u32"), inner.const(0, "u32"),
                            "u32")
            inner.if_(on, apply)
    e.for_(e.const(0, "s32"), e.const(n, "s32"), e.const(1, "s32"), [], body)
    for site in sites:
        if not site.scattered:
            e.st("global", site.dest, e.const(0, "u64"), "u64")


__all__ = ["finish_ordered", "ordered_update"]
