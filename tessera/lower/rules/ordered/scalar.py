"""Updates of one global element from several tiles, applied in tile order on a GPU.

``total[0] += x`` from several tiles is applied in tile (group, then local id) order
by the tile interpreter and the Target IR interpreter (DECISIONS.md: accumulated
across tiles in a fixed order), each tile's updates in its program order. A float add
is not associative, so the bits depend on that order, and ``red.global.add.f32`` lands
in whatever order the CTAs' atomics arrive; a ``*=`` (or a ``+=`` of ``f64``) has no
atomic at all, and a plain read-modify-write from several CTAs loses updates. This
module keeps the order on a GPU with the *last CTA combines* scheme:

* every execution of an update is an *event* of its tile, numbered in the tile's
  program order (:class:`Events`: a site in a loop of constant trip count has one
  event per trip, the two arms of an ``if`` have their own events). Event ``p`` of
  ``E`` writes its value, its destination's address and its site's tag to one slot,
  numbered in the interpreters' order: ``t * E + p`` for tile ``t`` where a tile is a
  CTA (a block kernel) or a thread on its own (``t`` the thread's linear index), and
  ``(c * E + p) * ntid.x + tid.x`` for the tiles of a group (CTA ``c``), which run
  each statement together in local-id order;
* at the kernel's end every CTA meets at ``bar.sync``; its thread 0 releases the
  CTA's writes (``fence.acq_rel.gpu``: cumulative over what the barrier ordered) and
  draws a ticket with ``atom.global.add.u32``. The CTA that draws the last ticket
  acquires and applies the tagged slots in slot order, rounding to the destination's
  format after each update, as the interpreters do (:mod:`.fold`).

The scratch (tags, values, addresses, the ticket) is module-scope ``.global``
variables (``ptx.module_var``), zero when the module loads and restored to zero by the
kernel, so the launch ABI, AOT bundles and CUDA graphs are unchanged. No CTA waits for
another (no spin, no forward-progress assumption), which also lets the lockstep Target
IR interpreter run the scheme as it is. Two launches of one kernel running at once
(two streams) would share the scratch: such launches are not ordered anyway.

The other known scheme, an ordered semaphore (each CTA spins until it is its turn),
needs no scratch but assumes CTAs are dispatched in index order, and a spin for a
later CTA cannot run in an interpreter that runs the CTAs in lockstep.

Where every tile owns its element (its address, evaluated for every tile while
compiling by :mod:`tessera.lower.rules.ordered.values`, differs from every other tile's,
and the kernel has no other update), the update is a plain read-modify-write and needs
no scratch. The scheme needs every event numbered (no update in a ``while`` loop or a
loop whose bounds are not constants) and at most :data:`MAX_SLOTS` slots. Otherwise a
float ``+=`` of ``f32`` keeps ``red.global.add.f32`` (its bits may then differ from the
interpreters' in the last places) and any other update of an element that tiles may
share is refused. Integer add, min and max stay ``red``: they are associative and
commutative, so the arrival order cannot change the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target import ops as target_ops
from tessera.ir.dialects.target.tables import ModuleVar
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.rules.ordered.events import launch_ids, root_of, slot_address, updates
from tessera.lower.rules.ordered.values import distinct, launch_values, monotonic, thread_values
from tessera.lower.values import Mem

#: register types whose values the slots hold (each slot is 8 bytes, the value first)
SLOT_TYPES = ("f32", "s32", "f64")
#: the most slots (events of the whole launch) the scheme keeps; a larger launch keeps
#: ``red`` for an f32 ``+=``
MAX_SLOTS = 1 << 22
#: the most tiles whose addresses are kept to tell whether each owns its element (a
#: larger launch's own elements are found where the addresses are monotonic)
MAX_EVALUATED = 1 << 24
#: special registers with one value in the whole grid
_UNIFORM_SREGS = {"ntid.x", "ntid.y", "ntid.z", "nctaid.x", "nctaid.y", "nctaid.z"}
_PURE = (target_ops.Const, target_ops.Binary, target_ops.Unary, target_ops.Cvt,
         target_ops.Setp, target_ops.Selp, target_ops.Fma)


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


@dataclass(frozen=True, eq=False)
class Site:
    """An ordered update: its tag in the slots (``index + 1``), its update, where its
    destination is kept (one module variable for the whole site, or None where each
    slot keeps its own), and the addresses it may update (evaluated while compiling;
    None if unknown)."""

    index: int
    name: str
    vtype: str
    mem: Mem
    dest: Value | None
    addresses: np.ndarray | None
    root: Value  # the kernel argument it updates

    @property
    def scattered(self) -> bool:
        """Whether each slot keeps its own destination."""
        return self.dest is None


def ordered_update(low: Lowerer, e: TargetEmitter, instr: Instr, addr: Value, value: Value,
                   vtype: str, name: str, mem: Mem) -> str:
    """This thread's update ``mem = mem <name> value`` (at ``addr``): ``"ordered"`` where
    it is recorded for the ordered combine at the kernel's end; ``"own"`` where each
    tile's element is its own (nothing emitted: a plain read-modify-write is exact);
    ``"reads"`` (nothing emitted) where the kernel also reads the tensor, which a
    deferred update would not show its tile; ``"unordered"`` (nothing emitted) where
    the scheme does not apply (see the module docstring)."""
    kernel = updates(low)
    events = kernel.scalar
    g = low.geom
    assert g is not None
    tiles = g.ctas * g.batch if low.block_kernel else g.launch_threads
    scattered = not _uniform(addr, low.params)
    if scattered and tiles > MAX_EVALUATED:  # too many to keep: own elements or nothing
        alone = kernel.single() and not low.block_kernel
        return "own" if alone and monotonic(g.ctas, g.batch, g.block, low.params, addr) \
            else "unordered"
    # a block kernel's scalar update runs once per CTA (by its thread 0)
    at = thread_values(g.ctas, g.batch, g.block, low.params, addr) if scattered and \
        not low.block_kernel else launch_values(g.ctas, g.batch, g.block, low.params)(addr)
    addresses = None if at is None else distinct(at)
    if tiles == 1 or (scattered and kernel.single() and at is not None and
                      addresses is not None and len(addresses) == len(at)):
        return "own"  # every tile its own element, and no other update could meet it
    if kernel.read_back(instr):
        return "reads"
    slots = tiles * events.per_tile
    position = events.position(low, e, instr)
    if vtype not in SLOT_TYPES or position is None or slots > MAX_SLOTS:
        return "unordered"
    sites: list[Site] = low.extra.setdefault("ordered", [])
    tag = f"__tessera_{low.fn.name}_ord"
    entry = low.e  # the entry block dominates the kernel's end, where the slots are read
    if not sites:
        low.extra["ordered_scratch"] = (
            entry.one(ModuleVar(f"{tag}_tags", 4 * slots, 4, restored=True)),
            entry.one(ModuleVar(f"{tag}_values", 8 * slots, 8)))
    tags, values = low.extra["ordered_scratch"]
    dest = None if scattered else \
        entry.one(ModuleVar(f"{tag}{len(sites)}_dest", 8, 8, restored=True))
    site = Site(len(sites), name, vtype, mem, dest, addresses, root_of(instr.operands[0]))
    sites.append(site)
    i = _slot_index(low, e, position, events.per_tile)
    if scattered:
        if "ordered_dests" not in low.extra:
            low.extra["ordered_dests"] = entry.one(ModuleVar(f"{tag}_dests", 8 * slots, 8))
        e.st("global", slot_address(e, low.extra["ordered_dests"], i, 8), addr, "u64")
    else:
        e.st("global", dest, addr, "u64")
    e.st("global", slot_address(e, values, i, 8), value, vtype)
    e.st("global", slot_address(e, tags, i, 4), e.const(site.index + 1, "u32"), "u32")
    return "ordered"


#: how each update is written in a kernel
_SPELLING = {"add": "+=", "sub": "-=", "mul": "*=", "div": "/=", "max": "max=", "min": "min="}


def refuse_unordered(instr: Instr, name: str, how: str) -> None:
    """The error for an update of a shared element that neither the ordered scheme nor
    an atomic can apply (``how``: what :func:`ordered_update` said)."""
    what = f"'{_SPELLING.get(name, name)}' of a global element that several tiles may update"
    if how == "reads":
        raise UnsupportedError(
            f"{what}, in a kernel that also reads that tensor, cannot be applied in tile order "
            "on a GPU: the update would wait for the kernel's end, after the tile's reads",
            loc=instr.loc, hint="read the result in a second launch")
    raise UnsupportedError(
        f"{what} cannot be applied in tile order on a GPU here: it is in a loop whose trip "
        "count is not a constant, or the launch has too many updates to keep", loc=instr.loc,
        hint="accumulate in a register and update memory once per tile, after the loop")


def _slot_index(low: Lowerer, e: TargetEmitter, position: Value, per_tile: int) -> Value:
    """The slot of this thread's event ``position`` (see the module docstring): event
    order is tile order, then program order, except that the tiles of a group (the
    threads of a CTA) run each statement together, in local-id order."""
    g = low.geom
    assert g is not None
    cta, tid = launch_ids(low)
    if low.block_kernel:  # one tile per CTA
        return e.add(e.mul(cta, e.const(per_tile, "s32"), "s32"), position, "s32")
    if g.packed:  # one tile per thread, each tile on its own
        tile = e.add(e.mul(cta, e.const(g.block, "s32"), "s32"), tid, "s32")
        return e.add(e.mul(tile, e.const(per_tile, "s32"), "s32"), position, "s32")
    event = e.add(e.mul(cta, e.const(per_tile, "s32"), "s32"), position, "s32")
    return e.add(e.mul(event, e.const(g.block, "s32"), "s32"), tid, "s32")


__all__ = ["MAX_SLOTS", "SLOT_TYPES", "Site", "ordered_update", "refuse_unordered"]
