"""Schedule IR: *how* a graph is computed, without fixing each tile's code.

A scheduled function is a :class:`~tessera.ir.core.Function` of kind ``schedule.func``
whose body holds only ``schedule.kernel`` instructions and a ``schedule.return``. A
kernel is one launch: its region holds the fused Graph IR ops (unchanged, so the region
means what the graph interpreter says it means), its operands are the tensors it reads
from global memory and its results the tensors it writes there. Its attributes say how
the region is run:

* ``extents`` / ``kinds``: the kernel's loops in loop order, outermost first (the
  region's iteration space, :mod:`tessera.ir.dialects.schedule.space`). ``"grid"``
  loops run their tiles in parallel (one program instance per tile), ``"seq"`` loops
  run their tiles in order inside one program, ``"split"`` loops are reductions cut
  into ``split`` slices run in parallel and combined in slice order;
* ``tile``: the tile extent of each loop (empty until the ``tile`` pass);
* ``reduction``: ``"none"`` (no reduction loop), ``"in_tile"`` (each reduction is
  finished inside one program, its tiles visited in a fixed order), ``"split_k"``,
  ``"two_pass"`` (statistics first, then the values that use them), ``"blocked"``
  (the reduced rows visited block by block in one program, each sum carried in an
  exact accumulator and rounded once after the last block);
* ``stages``: the depth of the pipeline staging operands through shared memory;
* ``inputs``: where each operand is read through (``"global"`` into registers, or
  ``"shared"``); ``temps``: where each result of the region's ops lives
  (``"registers"``, ``"shared"``, ``"global"`` or ``"view"`` for index maps that
  store nothing). Kernel results always live in global memory.

The schedule of a graph function placed on a mesh is a per-device program: its kernels
work on one device's local blocks and ``schedule.collective`` steps
(:mod:`.collective`) run the placed graph's collectives between them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError, TesseraError
from tessera.ir.core import Block, Function, Instr, Op, Terminator, Type, register_op
from tessera.ir.dialects.schedule.collective import ScheduledCollective, block_fits
from tessera.ir.dialects.schedule.space import IterationSpace, iteration_space

FUNC = "schedule.func"
LOOP_KINDS = ("grid", "seq", "split")
REDUCTIONS = ("none", "in_tile", "split_k", "two_pass", "blocked")
INPUT_PLACES = ("global", "shared")
TEMP_PLACES = ("registers", "shared", "global", "view")


@register_op
@dataclass(frozen=True)
class Return(Terminator):
    """Ends a scheduled function; its operands are the function's results."""

    name: ClassVar[str] = "schedule.return"


@register_op
@dataclass(frozen=True)
class Yield(Terminator):
    """Ends a kernel's region; its operands are the kernel's results."""

    name: ClassVar[str] = "schedule.yield"


def _choices(what: str, values: Sequence[str], allowed: Sequence[str]) -> None:
    for v in values:
        if v not in allowed:
            raise IRVerifyError(f"schedule.kernel {what} {v!r} is not one of "
                                f"{', '.join(allowed)}")


@register_op
@dataclass(frozen=True)
class ScheduledKernel(Op):
    """One launch of a fused group of Graph IR ops (see the module docstring)."""

    name: ClassVar[str] = "schedule.kernel"
    num_regions: ClassVar[int] = 1
    pure: ClassVar[bool] = True
    label: str
    extents: tuple[int, ...]
    kinds: tuple[str, ...]
    tile: tuple[int, ...] = ()
    order: tuple[int, ...] = ()
    reduction: str = "none"
    split: int = 1
    stages: int = 1
    inputs: tuple[str, ...] = ()
    temps: tuple[str, ...] = ()

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        raise IRVerifyError("schedule.kernel takes its result types from its region")

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        rank = len(self.extents)
        if len(self.kinds) != rank or any(not isinstance(e, int) or e < 2
                                          for e in self.extents):
            raise IRVerifyError("schedule.kernel needs one kind per loop and extents > 1, "
                                f"got extents {self.extents} and kinds {self.kinds}")
        _choices("loop kind", self.kinds, LOOP_KINDS)
        _choices("reduction", (self.reduction,), REDUCTIONS)
        _choices("input placement", self.inputs, INPUT_PLACES)
        _choices("temp placement", self.temps, TEMP_PLACES)
        if self.order and sorted(self.order) != list(range(rank)):
            raise IRVerifyError(f"schedule.kernel order {self.order} is not a permutation "
                                f"of its {rank} loops")
        if self.inputs and len(self.inputs) != len(operands):
            raise IRVerifyError(f"schedule.kernel places {len(self.inputs)} inputs but has "
                                f"{len(operands)} operands")
        if not isinstance(self.stages, int) or self.stages < 1:
            raise IRVerifyError(f"schedule.kernel stages must be >= 1, not {self.stages}")
        split_loops = self.kinds.count("split")
        if (self.reduction == "split_k") != (split_loops == 1) or \
                (self.reduction == "split_k") != (self.split > 1) or self.split < 1:
            raise IRVerifyError("schedule.kernel: split_k needs exactly one 'split' loop and "
                                f"split > 1, got reduction {self.reduction!r}, split "
                                f"{self.split} and {split_loops} split loops")
        if not self.tile and rank:  # a kernel without loops has no tiles to wait for
            if self.inputs or self.temps or self.reduction != "none":
                raise IRVerifyError("schedule.kernel is placed or given a reduction "
                                    "strategy before it has tile sizes")
            return
        if len(self.tile) != rank or any(not isinstance(t, int) or t < 1 for t in self.tile):
            raise IRVerifyError(f"schedule.kernel tile {self.tile} needs one positive size "
                                f"per loop ({rank})")
        reducing = any(k != "grid" for k in self.kinds)
        if reducing != (self.reduction != "none"):
            raise IRVerifyError(f"schedule.kernel reduction {self.reduction!r} does not fit "
                                f"its loops {self.kinds}")

    def verify_regions(self, instr: Instr) -> None:
        block = instr.regions[0].block
        if [a.type for a in block.args] != [v.type for v in instr.operands]:
            raise IRVerifyError("schedule.kernel region arguments must match its operands")
        term = block.terminator
        if term is None or not isinstance(term.op, Yield) or \
                [v.type for v in term.operands] != [r.type for r in instr.results]:
            raise IRVerifyError("schedule.kernel region must end with schedule.yield of "
                                "its result types")
        inside = set(block.args)
        count = 0
        for inner in _graph_ops(block):
            if inner is not term and not inner.op.name.startswith("graph."):
                raise IRVerifyError(f"schedule.kernel regions hold Graph IR ops, not "
                                    f"{inner.op.name}")
            if inner.parent is block and any(v not in inside for v in inner.operands):
                raise IRVerifyError(f"{inner.op.name} in a schedule.kernel reads a value "
                                    "from outside the kernel",
                                    hint="pass it in as an operand of the kernel")
            inside.update(inner.results)
            if inner.parent is block and inner is not term:
                count += len(inner.results)
        if self.temps and len(self.temps) != count:
            raise IRVerifyError(f"schedule.kernel places {len(self.temps)} temps but its "
                                f"region computes {count} values")
        space = space_of(instr)
        if space.extents != self.extents or any(
                (k == "grid") != (want == "grid") for k, want in zip(self.kinds, space.kinds)):
            raise IRVerifyError(
                f"schedule.kernel loops {self.extents} {self.kinds} are not its region's "
                f"iteration space {space.extents} {space.kinds}",
                hint="a loop that an op reduces is never a grid loop")


def _graph_ops(block: Block) -> Iterator[Instr]:
    """The instructions of ``block`` and of its nested regions, except the region of a
    ``graph.kernel_call`` (the Tile IR of a hand-written kernel, launched as it is)."""
    for instr in block.instrs:
        yield instr
        if instr.op.name != "graph.kernel_call":
            for region in instr.regions:
                for inner in region.blocks:
                    yield from _graph_ops(inner)


def space_of(instr: Instr) -> IterationSpace:
    """The iteration space of a kernel instruction's region."""
    block = instr.regions[0].block
    term = block.terminator
    return iteration_space(block, term.operands if term is not None else [])


def check_function(fn: Function, *, collectives: bool = False) -> None:
    """A scheduled function holds kernels and ends with ``schedule.return``; with
    ``collectives``, a per-device schedule, ``schedule.collective`` steps as well."""
    if fn.kind != FUNC:
        raise IRVerifyError(f"@{fn.name} is a {fn.kind}, not a {FUNC}", loc=fn.loc)
    allowed: tuple[type, ...] = (ScheduledKernel, Return)
    if collectives:
        allowed += (ScheduledCollective,)
    for instr in fn.body.instrs:
        if not isinstance(instr.op, allowed):
            raise IRVerifyError(f"a {FUNC} holds schedule.kernel instructions, not "
                                f"{instr.op.name}", loc=instr.loc,
                                hint="run graph-to-schedule on Graph IR functions" if
                                not isinstance(instr.op, ScheduledCollective) else
                                "a schedule with collectives runs on a mesh: lower the "
                                "segments between them")


def kernels(fn: Function) -> list[Instr]:
    """The kernel instructions of a scheduled function, in launch order."""
    return [i for i in fn.body.instrs if isinstance(i.op, ScheduledKernel)]


class TileShapeError(TesseraError):
    """A schedule the user asked for that cannot be built (a ``tile_shape`` hint that is
    malformed, conflicts with another, or needs more memory than the target has)."""

    kind = "tile shape error"


__all__ = ["FUNC", "INPUT_PLACES", "LOOP_KINDS", "REDUCTIONS", "TEMP_PLACES", "IterationSpace",
           "Return", "ScheduledCollective", "ScheduledKernel", "TileShapeError", "Yield",
           "block_fits", "check_function", "iteration_space", "kernels", "space_of"]
