"""A ``graph.kernel_call`` in the host program: the hand-written kernel's own Tile IR,
launched as it is, after a copy of each operand it writes.

The scheduler gives every kernel call a ``schedule.kernel`` of its own, reading its
operands from global buffers. Here the call becomes launches:

* for each parameter the kernel writes in place, a generated copy kernel fills the
  parameter's result buffer from the operand's buffer (a graph value is never written);
* the kernel itself, with its grid, its parameters bound to the operand, copy and
  ``out_shape=`` buffers (which start zero-filled, like every buffer the host program
  allocates) and, for a kernel that returns a tile, the result buffer last.

A result nobody reads still gets a buffer (the kernel writes it).
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.ir.core import Block, Builder, Function, Instr
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import tile as tile_ops
from tessera.ir.dialects.graph.kernel import RETURNED, tile_function
from tessera.ir.dialects.tile import memory as tm
from tessera.ir.transforms.to_tile.program import Launch, TileProgram
from tessera.ir.types import TensorType


def kernel_call_of(kernel: Instr) -> Instr | None:
    """The ``graph.kernel_call`` a ``schedule.kernel`` launches, if that is what it does."""
    ops = [i for i in kernel.regions[0].block.instrs if not i.op.terminator]
    if len(ops) == 1 and isinstance(ops[0].op, graph_ops.KernelCall):
        return ops[0]
    return None


def _fresh(name: str, taken: dict[str, object]) -> str:
    k, out = 1, name
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    return out


def copy_kernel(name: str, t: TensorType) -> Function:
    """A ``tile.kernel`` copying a ``t`` buffer into another: one program per index of
    the leading axis, each copying that slice."""
    body = Block()
    src = body.add_arg(tile_ops.MemRefType("global", tuple(t.shape), t.element), "src")
    dst = body.add_arg(tile_ops.MemRefType("global", tuple(t.shape), t.element), "dst")
    b = Builder(body)
    if t.rank == 0:
        b.create(tm.Store(), [dst, b.create(tm.Load(), [src])[0]])
    else:
        (row,) = b.create(tile_ops.GridCoord(0), [])
        (zero,) = b.create(tile_ops.Constant(0, tile_ops.INDEX), [])
        starts = [row] + [zero] * (t.rank - 1)
        view = tm.View((1, *t.shape[1:]), (0,))
        (tile,) = b.create(tm.Load(), b.create(view, [src, *starts]))
        b.create(tm.Store(), [b.create(view, [dst, *starts])[0], tile])
    b.create(tile_ops.Return(), [])
    grid = (max(int(t.shape[0]), 1),) if t.rank else (1,)
    return Function(name, body, [], kind=tile_ops.KERNEL,
                    attrs={"grid": grid, "group_size": 1})


def add_kernel_call(program: TileProgram, kernel: Instr, call: Instr, name: str,
                    params: Sequence[str], outs: Sequence[str]) -> None:
    """Add the launches of the ``schedule.kernel`` ``kernel`` holding the kernel call
    ``call`` to ``program``; ``params`` and ``outs`` name its operand and result buffers."""
    op = call.op
    assert isinstance(op, graph_ops.KernelCall)
    region = kernel.regions[0].block
    term = region.terminator
    assert term is not None
    yielded = dict(zip(term.operands, outs))
    result_buffer = {}
    for r, p in zip(call.results, op.results):
        buffer = yielded.get(r)
        if buffer is None:  # written but never read: the kernel still needs memory
            buffer = _fresh(f"{name}_scratch", program.buffers)
            assert isinstance(r.type, TensorType)
            program.buffers[buffer] = r.type
        result_buffer[p] = buffer
    operand_buffer = iter(params[region.args.index(v)] for v in call.operands)
    fn = tile_function(call)
    args: list[str] = []
    for k in range(len(fn.args)):
        if k in op.fresh:
            args.append(result_buffer[k])
            continue
        source = next(operand_buffer)
        if k in result_buffer:  # written in place: on a copy of the operand
            t = program.buffers[source]
            copy = copy_kernel(_fresh(f"{name}_copy", program.module.functions), t)
            program.module.add(copy)
            program.launches.append(Launch(copy.name, tuple(copy.attrs["grid"]),
                                           (source, result_buffer[k])))
            source = result_buffer[k]
        args.append(source)
    if RETURNED in result_buffer:
        args.append(result_buffer[RETURNED])
    fn.name = _fresh(f"{name}_{op.kernel}", program.module.functions)
    program.module.add(fn)
    program.launches.append(Launch(fn.name, op.grid, tuple(args)))


__all__ = ["add_kernel_call", "copy_kernel", "kernel_call_of"]
