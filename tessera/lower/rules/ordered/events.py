"""Every execution of an update, numbered in its tile's program order.

The interpreters apply a tile's updates in its program order, and the tiles in tile
order. The ordered schemes of this package keep that order on a GPU by giving each
execution of an update (an *event*) a number within its tile, known while compiling
up to the loop indices: an update in a loop of constant trip count has one event per
trip, the arms of an ``if`` have events of their own (only one arm's happen), and an
update in a ``while`` loop or a loop of run-time bounds has none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tessera.ir.core import Block, Function, Instr, Value, walk
from tessera.ir.dialects import tile as tile_ir
from tessera.ir.dialects.tile import memory as tile_memory
from tessera.lower.core import Lowerer
from tessera.lower.emit import TargetEmitter
from tessera.lower.values import Scalar, mem_type


@dataclass
class Events:
    """Where each update that ``counts`` of a kernel falls in its tile's program order:
    its first event (``offsets``), the loops of constant trip count around it,
    outermost first (``loops``), the events of one trip of each loop's body
    (``strides``), and the events of a whole tile (``per_tile``). Updates in a loop
    whose trip count is not a constant have no event."""

    counts: Callable[[Instr], bool]
    offsets: dict[int, int] = field(default_factory=dict)
    loops: dict[int, tuple[Instr, ...]] = field(default_factory=dict)
    strides: dict[int, int] = field(default_factory=dict)
    per_tile: int = 0

    def layout(self, block: Block, base: int, loops: tuple[Instr, ...]) -> int:
        """Numbers the events of ``block`` from ``base``; returns how many it has."""
        count = 0
        for instr in block.instrs:
            if self.counts(instr):
                self.offsets[id(instr)] = base + count
                self.loops[id(instr)] = loops
                count += 1
            elif isinstance(instr.op, tile_ir.For | tile_ir.While):
                trips = tile_ir.constant_trips(instr)
                if trips is not None:
                    body = self.layout(instr.regions[0].block, base + count, (*loops, instr))
                    self.strides[id(instr)] = body
                    count += trips * body
            else:  # an if's arms (or any other op's regions) in turn
                for region in instr.regions:
                    count += self.layout(region.block, base + count, loops)
        return count


    def position(self, low: Lowerer, e: TargetEmitter, instr: Instr) -> Value | None:
        """The event number of this execution of ``instr`` in its tile (``s32``,
        emitted with ``e`` from the loop indices), or None where it has none."""
        if id(instr) not in self.offsets:
            return None
        pos = e.const(self.offsets[id(instr)], "s32")
        for loop in self.loops[id(instr)]:
            index = low.env.get(loop.regions[0].block.args[0])
            if not isinstance(index, Scalar):
                return None  # a loop the lowering unrolled or pipelined
            lo, _, step = (v.owner.op.value for v in loop.operands[:3])  # constants
            trip = e.bin("sub", index.reg, e.const(lo, "s32"), "s32")
            if step != 1:
                trip = e.bin("div", trip, e.const(step, "s32"), "s32")
            pos = e.add(pos, e.mul(trip, e.const(self.strides[id(loop)], "s32"), "s32"), "s32")
        return pos


def scalar_updates(instr: Instr) -> bool:
    """A scalar update of global memory that is not an integer add, min or max (those
    stay atomic: any order gives their result)."""
    t = _global_update(instr)
    return t is not None and t.rank == 0 and not (
        instr.op.op in ("add", "min", "max") and mem_type(t.element) == "s32")


def tensor_updates(instr: Instr) -> bool:
    """An update of a window of global memory (``C[...] += tile``)."""
    t = _global_update(instr)
    return t is not None and t.rank > 0


def _global_update(instr: Instr) -> tile_ir.MemRefType | None:
    t = instr.operands[0].type if isinstance(instr.op, tile_memory.Update) else None
    return t if isinstance(t, tile_ir.MemRefType) and t.space == "global" else None


def root_of(view: Value) -> Value:
    """The kernel argument a view of global memory is a view of."""
    while isinstance(view.owner, Instr) and view.owner.operands:
        view = view.owner.operands[0]
    return view


def updates_of(fn: Function) -> dict[Value, int]:
    """How many updates of global memory ``fn`` has into each kernel argument."""
    count: dict[Value, int] = {}
    for instr in walk(fn.body):
        if _global_update(instr) is not None:
            root = root_of(instr.operands[0])
            count[root] = count.get(root, 0) + 1
    return count


def read_roots(fn: Function) -> set[Value]:
    """The kernel arguments ``fn`` reads (loads, masked and vector loads, async copies
    from global memory): an update of one of them cannot wait for the kernel's end,
    where its tile's own later reads would not see it."""
    roots = set()
    for instr in walk(fn.body):
        op = instr.op
        if isinstance(op, tile_memory.Load | tile_memory.MaskedLoad | tile_memory.LoadVector):
            roots.add(root_of(instr.operands[0]))
        elif isinstance(op, tile_memory.CpAsync):
            roots.add(root_of(instr.operands[1]))
    return roots


def events_of(fn: Function, counts: Callable[[Instr], bool] = scalar_updates) -> Events:
    """The events of ``fn``'s updates that ``counts`` (see :class:`Events`)."""
    events = Events(counts)
    events.per_tile = events.layout(fn.body, 0, ())
    return events


class KernelUpdates:
    """What the ordered schemes ask of one kernel's updates, found once per lowering
    (:func:`updates`): the events of its scalar and of its tensor updates, how many
    updates of global memory go into each kernel argument, and the arguments it reads."""

    def __init__(self, fn: Function) -> None:
        self.scalar = events_of(fn, scalar_updates)
        self.tensor = events_of(fn, tensor_updates)
        self.counts = updates_of(fn)
        self.reads = read_roots(fn)

    def single(self) -> bool:
        """Whether the kernel has one update of global memory (no other could meet it)."""
        return sum(self.counts.values()) == 1

    def alone(self, instr: Instr) -> bool:
        """Whether ``instr`` is the only update of its kernel argument."""
        return self.counts.get(root_of(instr.operands[0])) == 1

    def read_back(self, instr: Instr) -> bool:
        """Whether the kernel also reads the argument ``instr`` updates: the update
        cannot wait for the kernel's end, where its tile's own reads would miss it."""
        return root_of(instr.operands[0]) in self.reads


def updates(low: Lowerer) -> KernelUpdates:
    """The :class:`KernelUpdates` of the kernel ``low`` lowers (found on first use)."""
    if "updates" not in low.extra:
        low.extra["updates"] = KernelUpdates(low.fn)
    return low.extra["updates"]


def launch_ids(low: Lowerer) -> tuple[Value, Value]:
    """This CTA's linear index in the launch (``ctaid.y * nctaid.x + ctaid.x``) and its
    thread's ``tid.x``, as ``s32``, computed once in the entry block (which dominates
    every update and the kernel's end)."""
    if "launch_ids" not in low.extra:
        e, g = low.e, low.geom
        assert g is not None
        cta = e.add(e.mul(e.cvt(e.sreg("ctaid.y"), "s32", "u32"), e.const(g.ctas, "s32"),
                          "s32"), e.cvt(e.sreg("ctaid.x"), "s32", "u32"), "s32")
        low.extra["launch_ids"] = (cta, e.cvt(e.sreg("tid.x"), "s32", "u32"))
    return low.extra["launch_ids"]


def slot_address(e: TargetEmitter, base: Value, index: Value, size: int,
                 itype: str = "s32") -> Value:
    """``base + index * size`` (a global address) for an ``s32`` or ``u32`` index."""
    wide = e.bin("mul", index, e.const(size, itype), itype, "wide")
    return e.add(base, wide if itype == "u32" else e.cvt(wide, "u64", "s64"), "u64")


__all__ = ["Events", "KernelUpdates", "events_of", "launch_ids", "read_roots", "root_of",
           "scalar_updates", "slot_address", "tensor_updates", "updates", "updates_of"]
