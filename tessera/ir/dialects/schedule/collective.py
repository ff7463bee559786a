"""``schedule.collective``: a collective between the kernels of a per-device schedule.

A graph function placed on a mesh is scheduled per device: the kernels of one device
work on its local blocks (unplaced local types), and the collectives that the placed
Graph IR holds run between them. A ``schedule.collective`` is one such step. Its one
operand and one result are the device's local values; its region holds the Graph IR
collectives it runs on the *global* placed values (``graph.all_reduce``,
``graph.all_gather``, ...), unchanged, so the region means what the mesh simulator's
run of the placed graph says it means::

    %9 = schedule.collective(%8) {label = "c0"} (
      ^bb(%10: tensor<16x8xf32, mesh<dp=2, tp=4>[dp, _] partial(tp)>) {
        %11 = graph.all_reduce(%10) {axis = "tp"} : (...) -> tensor<16x8xf32, mesh<...>[dp, _]>
        schedule.yield(%11) : (...) -> ()
      }
    ) : (tensor<8x8xf32>) -> tensor<8x8xf32>

The verifier checks that the region reads only its argument and holds only Graph IR
collectives, that the local operand and result are blocks of the region's global
argument and yielded value (a dim split over ``k`` devices has ``numpy.array_split``
pieces: ``n // k`` or ``n // k + 1`` long), and that elements and ranks agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Instr, Op, Type, register_op
from tessera.ir.types import TensorType


def block_fits(local: TensorType, placed: TensorType) -> bool:
    """Whether ``local`` (unplaced) can be one device's block of ``placed``: same
    element and rank, and each dim a ``numpy.array_split`` piece of the global dim."""
    s = placed.sharding
    if s is None or local.sharding is not None or local.element != placed.element or \
            local.rank != placed.rank:
        return False
    for n, m, axes in zip(local.shape, placed.shape, s.dims):
        k = s.size(axes) if axes else 1
        if not isinstance(n, int) or not isinstance(m, int) or n not in (m // k,
                                                                         -(-m // k)):
            return False
    return True


@register_op
@dataclass(frozen=True)
class ScheduledCollective(Op):
    """One collective step between kernels (see the module docstring)."""

    name: ClassVar[str] = "schedule.collective"
    num_regions: ClassVar[int] = 1
    #: a collective synchronises the devices of its groups: never merged or dropped
    pure: ClassVar[bool] = False
    label: str

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        raise IRVerifyError("schedule.collective takes its result type from its region")

    def verify(self, operands: Sequence[Type], results: Sequence[Type]) -> None:
        if len(operands) != 1 or len(results) != 1:
            raise IRVerifyError(f"schedule.collective has one operand and one result, got "
                                f"{len(operands)} and {len(results)}")
        for t in (*operands, *results):
            if not isinstance(t, TensorType) or t.sharding is not None:
                raise IRVerifyError(f"schedule.collective moves local (unplaced) tensors, "
                                    f"not {t}")

    def verify_regions(self, instr: Instr) -> None:
        from tessera.ir.dialects.graph.collective import Collective
        from tessera.ir.dialects.schedule import Yield

        block = instr.regions[0].block
        if len(block.args) != 1:
            raise IRVerifyError("schedule.collective region takes one argument")
        local_in, placed_in = instr.operands[0].type, block.args[0].type
        if not isinstance(placed_in, TensorType) or not isinstance(local_in, TensorType) or \
                not block_fits(local_in, placed_in):
            raise IRVerifyError(f"schedule.collective operand {local_in} is not a device's "
                                f"block of its region's argument {placed_in}")
        inside = set(block.args)
        term = block.terminator
        for inner in block.instrs:
            if inner is term:
                break
            if not isinstance(inner.op, Collective):
                raise IRVerifyError(f"schedule.collective regions hold Graph IR collectives, "
                                    f"not {inner.op.name}")
            if any(v not in inside for v in inner.operands):
                raise IRVerifyError(f"{inner.op.name} in a schedule.collective reads a value "
                                    "from outside it")
            inside.update(inner.results)
        if term is None or not isinstance(term.op, Yield) or len(term.operands) != 1 or \
                term.operands[0] not in inside:
            raise IRVerifyError("schedule.collective region must end with schedule.yield of "
                                "one value")
        local_out, placed_out = instr.results[0].type, term.operands[0].type
        if not isinstance(placed_out, TensorType) or not isinstance(local_out, TensorType) \
                or not block_fits(local_out, placed_out):
            raise IRVerifyError(f"schedule.collective result {local_out} is not a device's "
                                f"block of the value its region yields, {placed_out}")


__all__ = ["ScheduledCollective", "block_fits"]
