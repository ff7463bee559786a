"""Tensor updates ``C[window] += tile`` from several CTAs, applied in tile order on a GPU.

Both interpreters add the tiles of a ``+=`` into global memory in tile order, one
rounding after each (DECISIONS.md: accumulated across tiles in a fixed order). With
``red.global.add.f32`` a GPU adds them in the order its atomics arrive, so a split-K
GEMM's bits would vary from run to run. Where the windows are known while compiling,
this module keeps the order with a *last CTA of the window combines* scheme:

* the kernel's window is evaluated for each CTA (:mod:`tessera.lower.rules.ordered.values`);
  CTAs whose windows coincide form a group, in CTA (= tile) order; windows of
  different groups must not overlap;
* the first tile of a group adds its values into the window itself (a plain
  read-modify-write: no other tile touches the window before the group's last
  ticket); each later tile stores its values into scratch rows of its own;
* then the CTA meets at ``bar.sync``; its thread 0 releases the CTA's writes
  (``fence.acq_rel.gpu``) and draws a ticket of the group (``atom.global.add.u32``);
  the CTA that draws the group's last ticket acquires (``fence.acq_rel.gpu``) and its
  threads add the later tiles' rows into the window in tile order, each thread the
  elements it holds (every tile of the group holds an element in the same register
  of the same thread), and put the ticket back to 0.

A group of one tile is the read-modify-write alone: no scratch, no ticket. The plan
(each CTA's group, scratch row, group size and first row) is a table in a module
variable with an initializer; the scratch rows and tickets are module variables too,
so the launch ABI is unchanged. No CTA waits for another.

The scheme covers a block kernel's one update of a tensor at the kernel's top level
(run once by every CTA) whose windows evaluate while compiling, of at most
:data:`MAX_CTAS` CTAs and :data:`MAX_SCRATCH` bytes of scratch. Another ``+=`` of a
tensor is recorded as rows (:mod:`.rows`) where it can be, else keeps
``red.global.add.f32``, and the bits of a GPU run may then differ from the
interpreters' in the last places.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.errors import UnsupportedError
from tessera.ir.core import Instr, Value
from tessera.ir.dialects.target.async_ops import Fence
from tessera.ir.dialects.target.ops import Reduce
from tessera.ir.dialects.target.ptx_ops import Atom
from tessera.ir.dialects.target.tables import ModuleVar
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.layout import Acc, Blocked
from tessera.lower.rules.memory import address
from tessera.lower.rules.ordered.events import launch_ids, slot_address, updates
from tessera.lower.rules.ordered.rows import Visit, rows_into
from tessera.lower.rules.ordered.values import distinct, launch_values
from tessera.lower.rules.tensor import for_each_element, materialize
from tessera.lower.values import Dist, Lowered, Mem, elem_bytes, mem_type

#: the most CTAs whose windows are evaluated while compiling
MAX_CTAS = 1 << 16
#: the most bytes of scratch rows (later tiles' values) a launch may keep
MAX_SCRATCH = 1 << 27
#: the most window elements times groups checked for overlap while compiling
MAX_FOOTPRINT = 1 << 24
#: a plan's "no scratch row" (the first tile of its window)
NO_ROW = 0xFFFFFFFF


def reduce_into(low: Lowerer, instr: Instr, mem: Mem, value: Lowered, layout: object) -> None:
    """``mem += value`` for a tensor that tiles of other CTAs may also add into (a
    split-K GEMM): in tile order by the window plan or the rows where one applies,
    else one ``red.global.add.f32`` per element."""
    e = low.em
    value = materialize(low, value, layout)
    if not isinstance(value, Dist) or value.type != "f32" or mem_type(mem.element) != "f32":
        raise UnsupportedError("'+=' of a tensor is lowered for f32 values into f32 memory",
                               loc=e.loc)
    visit, regs = _visitor(low, mem, value), value.regs
    # several updates of one tensor are applied in program order only by the rows
    plan = window_plan(low, instr, mem) if updates(low).alone(instr) else None
    assert low.geom is not None
    if plan is not None and plan.scratch_bytes(len(regs), low.geom.block) <= MAX_SCRATCH:
        ordered_into(low, plan, visit, regs)
        return
    if rows_into(low, instr, mem, visit, regs):
        return
    red = Reduce("global", "add", "f32")
    visit(e, lambda x, addr, r: x.op(red, [addr, regs[r]]))


def _visitor(low: Lowerer, mem: Mem, value: Dist) -> Visit:
    """The elements of ``value`` in ``mem`` (an accumulator's or a blocked tensor's)."""
    layout = value.layout
    if isinstance(layout, Acc):
        from tessera.lower.sm80.gemm import acc_rowcol

        if mem.strides[-1] != 1:  # the offsets below are row * stride + col
            raise UnsupportedError("accumulators are added into row-major views",
                                   hint="add into the tensor in its own layout", loc=low.em.loc)

        def acc(e: TargetEmitter, fn: Callable[[TargetEmitter, Value, int], None]) -> None:
            stride = e.const(mem.strides[0], "s32")
            for r, (row, col) in enumerate(acc_rowcol(e, layout.rows, layout.cols)):
                fn(e, address(e, mem, e.add(e.mul(row, stride, "s32"), col, "s32")), r)
        return acc
    if not isinstance(layout, Blocked):
        raise UnsupportedError("'+=' of a row-reduced tile is not lowered", loc=low.em.loc,
                               hint="store the rows with '=' instead")
    return lambda e, fn: for_each_element(low, layout, mem, fn, e)


@dataclass(frozen=True)
class WindowPlan:
    """Which CTAs add into the same window: per CTA (linear order) its group, its
    scratch row (``NO_ROW`` for a group's first tile), its group's size and first row."""

    groups: np.ndarray
    rows: np.ndarray
    sizes: np.ndarray
    starts: np.ndarray

    @property
    def scratch_rows(self) -> int:
        """Rows of scratch: one per tile after the first of its window."""
        return int(self.sizes.sum() - len(self.sizes))

    def scratch_bytes(self, nregs: int, block: int) -> int:
        """Bytes of scratch for ``nregs`` f32 registers of ``block`` threads a row."""
        return 4 * nregs * block * self.scratch_rows

    def words(self) -> tuple[int, ...]:
        """The plan as the ``u32`` table the kernel reads: four words per CTA."""
        n = len(self.groups)
        table = np.stack([self.groups, self.rows, self.sizes[self.groups],
                          self.starts[self.groups]], axis=1).astype(np.int64)
        return tuple(int(w) for w in table.reshape(4 * n))


def plan_windows(addresses: np.ndarray, footprint: np.ndarray) -> WindowPlan | None:
    """Group CTAs by their window's address (bytes, per CTA in tile order) given the
    byte offsets of the window's elements; None where windows of different groups
    overlap, or the check would be too large."""
    firsts, inverse = np.unique(addresses, return_inverse=True)
    if len(firsts) * len(footprint) > MAX_FOOTPRINT:
        return None
    if len(firsts) > 1:
        touched = (firsts[:, None] + footprint[None, :]).ravel()
        if len(distinct(touched)) != len(touched):
            return None
    # groups numbered by their first tile, ranks counted in tile order
    first_cta = np.full(len(firsts), len(addresses), np.int64)
    np.minimum.at(first_cta, inverse, np.arange(len(addresses)))
    renumber = np.argsort(np.argsort(first_cta))
    groups = renumber[inverse]
    sizes = np.bincount(groups, minlength=len(firsts))
    starts = np.concatenate([[0], np.cumsum(sizes - 1)[:-1]])
    order = np.argsort(groups, kind="stable")
    rank = np.empty(len(groups), np.int64)
    rank[order] = np.arange(len(groups)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    rows = np.where(rank == 0, NO_ROW, starts[groups] + rank - 1)
    return WindowPlan(groups, rows, sizes, starts)


def window_plan(low: Lowerer, instr: Instr, mem: Mem) -> WindowPlan | None:
    """The plan of a tensor ``+=`` of a block kernel, or None where the scheme does not
    apply (see the module docstring)."""
    g = low.geom
    # once per CTA: at the top level of the tile kernel, and of the lowered one or of a
    # warp-specialised kernel's consumer branch, which runs the epilogue
    consumers = low.em.block is not low.e.block
    if g is None or not low.block_kernel or g.packed or g.ctas * g.batch > MAX_CTAS or \
            not any(i is instr for i in low.fn.body.instrs) or (
                consumers and "continuation" not in low.extra):
        return None
    values = launch_values(g.ctas, g.batch, g.block, low.params)
    base = values(mem.base)
    offset = np.zeros(1, np.int64) if mem.offset is None else values(mem.offset)
    if base is None or offset is None:
        return None
    size = elem_bytes(mem.element)
    grids = np.meshgrid(*[np.arange(n) * s for n, s in zip(mem.shape, mem.strides)],
                        indexing="ij")
    footprint = np.unique(sum(grids, np.zeros(1, np.int64)).ravel() * size)
    plan = plan_windows(base + offset * size, footprint)
    # a consumer branch's threads add their own window, but cannot fold other CTAs' ones
    return None if plan is None or (consumers and int(plan.sizes.max()) > 1) else plan


def ordered_into(low: Lowerer, plan: WindowPlan, visit: Visit, values: list[Value]) -> None:
    """``mem += values`` in tile order by the plan (``visit`` gives where each register
    of ``values`` goes)."""
    e, g = low.em, low.geom
    assert g is not None

    def first(x: TargetEmitter) -> None:  # a window's first tile adds in place
        visit(x, lambda y, addr, r: y.st(
            "global", addr, y.add(y.ld("global", addr, "f32"), values[r], "f32"), "f32"))
    if int(plan.sizes.max()) == 1:  # every window has one tile: no other CTA adds there
        first(e)
        return
    nregs, block = len(values), g.block
    site = low.extra.setdefault("ordered_tiles", 0)
    low.extra["ordered_tiles"] = site + 1
    tag = f"__tessera_{low.fn.name}_tadd{site}"
    entry = low.e
    words = plan.words()
    table = entry.one(ModuleVar(f"{tag}_plan", 4 * len(words), 4, words=words))
    tickets = entry.one(ModuleVar(f"{tag}_tickets", 4 * len(plan.sizes), 4, restored=True))
    rows = entry.one(ModuleVar(f"{tag}_rows", plan.scratch_bytes(nregs, block), 4))
    info = slot_address(e, table, launch_ids(low)[0], 16)  # this CTA's four words
    group, row, size, start = (e.ld("global", info, "u32", offset=4 * k) for k in range(4))
    tid = e.sreg("tid.x")

    def slot(x: TargetEmitter, r: Value | int, line: Value) -> Value:
        """Scratch row ``line``'s value of this thread's register ``r``."""
        index = x.add(x.mul(x.add(x.mul(line, x.const(nregs, "u32"), "u32"),
                                  x.const(r, "u32"), "u32"), x.const(block, "u32"), "u32"),
                      tid, "u32")
        return slot_address(x, rows, index, 4, "u32")

    def later(x: TargetEmitter) -> None:
        visit(x, lambda y, addr, r: y.st("global", slot(y, r, row), values[r], "f32"))
    e.if_(e.setp("eq", row, e.const(NO_ROW, "u32"), "u32"), first, later)
    e.bar()  # the CTA's writes happen before its thread 0's release
    flag = low.shared_buffer("tadd", 4, 4)

    def arrive(x: TargetEmitter) -> None:
        x.op(Fence("acq_rel_gpu"))  # release this CTA's writes (ordered by bar.sync)
        drawn = x.one(Atom("global", "add", "u32"), slot_address(x, tickets, group, 4, "u32"),
                      x.const(1, "u32"))
        last = x.setp("eq", drawn, x.bin("sub", size, x.const(1, "u32"), "u32"), "u32")
        x.st("shared", flag, x.selp(x.const(1, "u32"), x.const(0, "u32"), last, "u32"),
             "u32")
    e.if_(e.setp("eq", tid, e.const(0, "u32"), "u32"), arrive)
    e.bar()  # thread 0's ticket (and its acquire, below) before every thread's reads

    def combine(x: TargetEmitter) -> None:
        x.op(Fence("acq_rel_gpu"))  # acquire the group's other CTAs' writes

        def fold(y: TargetEmitter, addr: Value, r: int) -> None:
            def step(z: TargetEmitter, j: Value, acc: Value) -> list[Value]:
                line = z.add(start, z.cvt(j, "u32", "s32"), "u32")
                return [z.add(acc, z.ld("global", slot(z, r, line), "f32"), "f32")]
            later_tiles = y.cvt(y.bin("sub", size, y.const(1, "u32"), "u32"), "s32", "u32")
            (total,) = y.for_(y.const(0, "s32"), later_tiles, y.const(1, "s32"),
                              [y.ld("global", addr, "f32")], step)
            y.st("global", addr, total, "f32")
        visit(x, fold)
        x.if_(x.setp("eq", tid, x.const(0, "u32"), "u32"),
              lambda y: y.st("global", slot_address(y, tickets, group, 4, "u32"),
                             y.const(0, "u32"), "u32"))
    last = e.setp("ne", e.ld("shared", flag, "u32"), e.const(0, "u32"), "u32")
    e.if_(last, combine)


__all__ = ["MAX_CTAS", "MAX_SCRATCH", "WindowPlan", "ordered_into", "plan_windows", "reduce_into",
           "window_plan"]
