"""Interpreter rules of the Graph IR ops that move data and of the structural ops.

Data movement (transpose, reshape, broadcast, slice, embed) works on the stored values
and rounds nothing. ``graph.custom`` runs its region, the primal body; ``graph.return``
and ``graph.yield`` pass their operands on.
"""

from __future__ import annotations

import numpy as np

from tessera.interp.apply import Apply, rule
from tessera.ir.dialects import graph as graph_ir


@rule(graph_ir.Return, graph_ir.Yield)
def terminator(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """The operands are the results of the enclosing function or region."""
    return list(operands)


@rule(graph_ir.Custom)
def custom(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Run the primal body with its block arguments bound to the operands.

    The derivative rule named by ``rule`` matters only to autodiff, never to values.
    """
    if len(ap.regions) != 1 or ap.run_block is None:
        raise ap.fail("needs exactly one region and a function runner",
                      hint="run graph.custom through run_function or run_op with regions")
    return ap.run_block(ap.regions[0].block, operands)


@rule(graph_ir.Transpose)
def transpose(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Result axis i is operand axis ``perm[i]``."""
    return [np.transpose(operands[0], ap.op.perm).copy(order="C")]


@rule(graph_ir.Reshape)
def reshape(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Row-major reshape."""
    (x,) = operands
    if x.size != int(np.prod(ap.op.shape, dtype=np.int64)):
        raise ap.fail(f"cannot reshape {x.shape} into {ap.op.shape}",
                      hint="the element counts must agree (check the symbolic dims)")
    return [x.reshape(ap.op.shape)]


@rule(graph_ir.Broadcast)
def broadcast(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """NumPy broadcasting to ``shape`` (trailing axes aligned)."""
    try:
        out = np.broadcast_to(operands[0], ap.op.shape)
    except ValueError:
        raise ap.fail(f"cannot broadcast {operands[0].shape} to {ap.op.shape}") from None
    return [out]


def _slices(ap: Apply, starts: tuple[int, ...], stops: tuple[int, ...],
            steps: tuple[int, ...], rank: int) -> tuple[slice, ...]:
    if not len(starts) == len(stops) == len(steps) == rank:
        raise ap.fail(f"needs one start/stop/step per axis of a rank-{rank} tensor")
    return tuple(slice(lo, hi, st) for lo, hi, st in zip(starts, stops, steps))


@rule(graph_ir.Slice)
def slice_(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Axis i keeps ``starts[i]:stops[i]:steps[i]``."""
    (x,) = operands
    op = ap.op
    return [x[_slices(ap, op.starts, op.stops, op.steps, x.ndim)]]


@rule(graph_ir.Embed)
def embed(ap: Apply, operands: list[np.ndarray]) -> list[np.ndarray]:
    """Zeros of ``shape`` with the operand placed at ``starts`` with ``steps``."""
    (x,) = operands
    op = ap.op
    out = np.zeros(op.shape, dtype=x.dtype)
    stops = tuple(lo + (n - 1) * st + 1 if n else lo
                  for lo, n, st in zip(op.starts, x.shape, op.steps))
    region = _slices(ap, op.starts, stops, op.steps, x.ndim)
    if out[region].shape != x.shape:
        raise ap.fail(f"a {x.shape} operand does not fit {op.shape} at {op.starts} by "
                      f"{op.steps}")
    out[region] = x
    return [out]
