"""Tensor updates ``C[view] += tile`` that the window plan (:mod:`.windows`) cannot
order, recorded as rows with their addresses and applied by the last CTA.

The window plan needs each CTA's window while compiling, one update at the kernel's
top level, and windows that coincide or do not meet. Any other tensor ``+=`` of a
block kernel (windows that overlap in part, an update under an ``if`` or in a loop of
constant trip count, a window chosen by loaded data, several updates of one tensor)
records each execution (event, :mod:`.events`) as a row of scratch: row ``c * E + p``
for CTA ``c`` (one tile) and its event ``p``, each thread its registers' values and
their global addresses (none for an element its mask leaves out), thread 0 the
update's tag. At the kernel's end the last CTA to draw a ticket (:mod:`.fold`) applies
the tagged rows in row order, which is the interpreters' order: tile order, then
program order. The elements of one row are distinct (one tile's window), so its
threads add a row in parallel, each the elements it recorded; a ``bar.sync``, which
orders the CTA's global accesses, separates one row from the next.

A warp-specialised kernel's epilogue (into windows several CTAs share: one its CTA
owns is a plain read-modify-write, :mod:`.windows`), an update in a loop of run-time
bounds, a view that repeats an element, a tensor the kernel also reads (its tile's
later reads must see the update) and a launch that would need more than
:data:`MAX_ROW_BYTES` of rows keep ``red.global.add.f32``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.tables import ModuleVar
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.rules.ordered.events import launch_ids, root_of, slot_address, updates
from tessera.lower.values import Mem

#: the most bytes of rows (values and addresses) a launch may keep
MAX_ROW_BYTES = 1 << 27

#: calls ``fn(emitter, address, register)`` for each element a thread adds, emitting
#: with ``emitter`` (each element under the guard it needs)
Visit = Callable[[TargetEmitter, Callable[[TargetEmitter, Value, int], None]], None]


@dataclass(frozen=True, eq=False)
class RowSite:
    """A recorded tensor update: its tag (``index + 1``), registers per thread, its
    rows of values and of addresses, and the kernel argument it updates."""

    index: int
    nregs: int
    values: Value
    addresses: Value
    root: Value


def rows_into(low: Lowerer, instr: Instr, mem: Mem, visit: Visit, regs: list[Value]) -> bool:
    """Records this execution of ``mem += regs`` as a row (see the module docstring);
    False where the scheme does not apply (nothing emitted)."""
    g = low.geom
    if g is None or not low.block_kernel or "continuation" in low.extra or \
            any(s == 0 and n > 1 for s, n in zip(mem.strides, mem.shape)):
        return False
    kernel = updates(low)
    if kernel.read_back(instr):
        return False  # the tile's own later reads must see its update
    events = kernel.tensor
    rows, nregs, block = g.ctas * g.batch * events.per_tile, len(regs), g.block
    e = low.em
    position = events.position(low, e, instr)
    if position is None or 12 * rows * nregs * block > MAX_ROW_BYTES:
        return False
    sites: list[RowSite] = low.extra.setdefault("ordered_rows", [])
    tag, entry = f"__tessera_{low.fn.name}_rows", low.e
    if not sites:
        low.extra["ordered_row_tags"] = entry.one(
            ModuleVar(f"{tag}_tags", 4 * rows, 4, restored=True))
    size = rows * nregs * block
    site = RowSite(len(sites), nregs, entry.one(ModuleVar(f"{tag}{len(sites)}", 4 * size, 4)),
                   entry.one(ModuleVar(f"{tag}{len(sites)}_at", 8 * size, 8, restored=True)),
                   root_of(instr.operands[0]))
    sites.append(site)
    cta, tid = launch_ids(low)
    row = e.add(e.mul(cta, e.const(events.per_tile, "s32"), "s32"), position, "s32")

    def record(x: TargetEmitter, addr: Value, r: int) -> None:
        index = _element(x, site, row, r, tid, block)
        x.st("global", slot_address(x, site.values, index, 4), regs[r], "f32")
        x.st("global", slot_address(x, site.addresses, index, 8), addr, "u64")
    visit(e, record)
    e.if_(e.setp("eq", tid, e.const(0, "s32"), "s32"), lambda x: x.st(
        "global", slot_address(x, low.extra["ordered_row_tags"], row, 4),
        x.const(site.index + 1, "u32"), "u32"))
    return True


def fold_rows(low: Lowerer, e: TargetEmitter, sites: list[RowSite]) -> None:
    """The last CTA (all its threads): each tagged row in row order, added into memory
    by the threads that recorded its elements, a ``bar.sync`` after each row."""
    g, events = low.geom, updates(low).tensor
    assert g is not None
    rows, block, tags = g.ctas * g.batch * events.per_tile, g.block, low.extra["ordered_row_tags"]
    tid = launch_ids(low)[1]

    def body(x: TargetEmitter, row: Value) -> None:
        tag = x.ld("global", slot_address(x, tags, row, 4), "u32")
        for site in sites:
            x.if_(x.setp("eq", tag, x.const(site.index + 1, "u32"), "u32"),
                  lambda y, site=site: _add_row(y, site, row, tid, block))
        x.bar()  # the row's additions before the next row's (and before its tag clears)
        x.if_(x.setp("eq", tid, x.const(0, "s32"), "s32"), lambda y: y.st(
            "global", slot_address(y, tags, row, 4), y.const(0, "u32"), "u32"))
    e.for_(e.const(0, "s32"), e.const(rows, "s32"), e.const(1, "s32"), [], body)


def _add_row(e: TargetEmitter, site: RowSite, row: Value, tid: Value, block: int) -> None:
    """This thread's recorded elements of ``row``: ``*addr += value``, address cleared."""
    for r in range(site.nregs):
        index = _element(e, site, row, r, tid, block)
        where = slot_address(e, site.addresses, index, 8)
        addr = e.ld("global", where, "u64")

        def add(x: TargetEmitter, index: Value = index, where: Value = where,
                addr: Value = addr) -> None:
            v = x.ld("global", slot_address(x, site.values, index, 4), "f32")
            x.st("global", addr, x.add(x.ld("global", addr, "f32"), v, "f32"), "f32")
            x.st("global", where, x.const(0, "u64"), "u64")
        e.if_(e.setp("ne", addr, e.const(0, "u64"), "u64"), add)


def _element(e: TargetEmitter, site: RowSite, row: Value, r: int, tid: Value,
             block: int) -> Value:
    """The index of register ``r`` of thread ``tid`` in ``row``: threads adjacent, so
    that a warp's stores and loads coalesce."""
    line = e.add(e.mul(row, e.const(site.nregs, "s32"), "s32"), e.const(r, "s32"), "s32")
    return e.add(e.mul(line, e.const(block, "s32"), "s32"), tid, "s32")


__all__ = ["MAX_ROW_BYTES", "RowSite", "Visit", "fold_rows", "rows_into"]
