"""The iteration space of a fused group of Graph IR ops: its loops, their extents and
which of them are reductions.

Every axis of every value in the group is a node; the ops' indexing rules join axes that
one loop runs over (an elementwise op joins each result axis with the same operand axis,
a matmul joins the contracted axes of its operands, a broadcast joins the axes it keeps).
The classes of axes are the group's loops, found with a union-find:

* the *grid* loops are the classes of the group's result axes that no op reduces, in
  the order of the results' axes (first result first). Results of one shape are
  joined axis by axis: every program writes the same tile of each (the Q, K and V
  projections of one kernel);
* the *sequential* loops are the classes some op reduces (a matmul's contracted axis,
  a reduction's or softmax's axis), after the grid loops in the order they are met,
  except that loops only matmuls contract come last: the MMA's K loop is innermost,
  inside attention's loop over keys or a norm's loop over its row.

Axes of extent 1 are no loops. Axes that only an index map reads (a reshape's or a
slice's operand) and that no result or reduction reaches are no loops either: the map
is folded into the indexing of the loops that remain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tessera.ir.core import Block, Instr, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.types import TensorType
from tessera.ir.unionfind import UnionFind

Axis = tuple[Value, int]


@dataclass
class IterationSpace:
    """The loops of a group: ``extents[i]`` and ``kinds[i]`` ("grid" or "seq") in loop
    order, and ``loop_of`` mapping each (value, axis) that lies on a loop to its index."""

    extents: tuple[int, ...]
    kinds: tuple[str, ...]
    loop_of: dict[Axis, int] = field(default_factory=dict)
    #: loops that a matmul of the group contracts over
    contracted: frozenset[int] = frozenset()

    def grid_loops(self, value: Value) -> frozenset[int]:
        """The grid loops that run over an axis of ``value``."""
        return frozenset(k for (v, _), k in self.loop_of.items()
                         if v is value and self.kinds[k] == "grid")


def _shape(v: Value) -> tuple[int, ...]:
    t = v.type
    return tuple(int(d) if isinstance(d, int) else 0 for d in t.shape) \
        if isinstance(t, TensorType) else ()


def _join_same(classes: UnionFind[Axis], a: Value, b: Value) -> None:
    """Join the axes of two values of one shape, axis by axis."""
    if _shape(a) == _shape(b):
        for k in range(len(_shape(a))):
            classes.join((b, k), (a, k))


def _link(instr: Instr, classes: UnionFind[Axis], reduced: list[Axis],
          contracted: list[Axis]) -> None:
    """Join the axes that ``instr``'s indexing rule puts on one loop."""
    op = instr.op
    out = instr.results[0] if len(instr.results) == 1 else None
    if out is None or isinstance(op, (graph_ops.Constant, graph_ops.Reshape,
                                      graph_ops.Slice, graph_ops.Embed, graph_ops.Custom,
                                      graph_ops.KernelCall)):
        return  # fresh axes: an index map (or a call) starts new loops
    if isinstance(op, graph_ops.MatMul):
        a, b = instr.operands
        rank = len(_shape(out))
        for k in range(rank - 2):
            classes.join((a, k), (out, k))
            classes.join((b, k), (out, k))
        classes.join((a, rank - 2), (out, rank - 2))
        classes.join((b, rank - 1), (out, rank - 1))
        classes.join((b, rank - 2), (a, rank - 1))
        contracted.append((a, rank - 1))
    elif isinstance(op, graph_ops.Reduce):
        (x,) = instr.operands
        axes = set(op.reduced_axes(len(_shape(x))))
        kept = [k for k in range(len(_shape(x))) if k not in axes]
        for j, k in enumerate(kept if not op.keepdims else range(len(_shape(x)))):
            if k not in axes:
                classes.join((x, k), (out, j))
        reduced += [(x, k) for k in axes]
    elif isinstance(op, graph_ops.Broadcast):
        (x,) = instr.operands
        lead = len(_shape(out)) - len(_shape(x))
        for k, d in enumerate(_shape(x)):
            if d == _shape(out)[lead + k]:
                classes.join((x, k), (out, lead + k))
    elif isinstance(op, graph_ops.Transpose):
        (x,) = instr.operands
        for k, p in enumerate(op.perm):
            classes.join((x, p), (out, k))
    elif isinstance(op, graph_ops.Mse):
        a, b = instr.operands
        _join_same(classes, a, b)
        reduced += [(a, k) for k in range(len(_shape(a)))]
    else:
        # elementwise ops, softmax, FFTs and collectives keep their operands' axes
        for x in instr.operands:
            _join_same(classes, out, x)
        if isinstance(op, (graph_ops.Softmax, graph_ops.Spectral)):
            reduced.append((out, op.axis % max(len(_shape(out)), 1)))


def iteration_space(block: Block, results: Sequence[Value]) -> IterationSpace:
    """The loops of the group of ops in ``block`` whose results are ``results``."""
    classes = UnionFind[Axis]()
    reduced: list[Axis] = []
    contracted: list[Axis] = []
    for instr in block.instrs:
        if not instr.op.terminator:
            _link(instr, classes, reduced, contracted)
    for k, v in enumerate(results):
        for w in results[:k]:
            _join_same(classes, v, w)  # results of one shape share the kernel's grid
    reduced_roots = {classes.find(a) for a in [*reduced, *contracted]}
    extent: dict[Axis, int] = {}
    for instr in block.instrs:
        for v in [*instr.operands, *instr.results]:
            for k, d in enumerate(_shape(v)):
                if d > 1:
                    extent[classes.find((v, k))] = d
    for v in block.args:
        for k, d in enumerate(_shape(v)):
            if d > 1:
                extent[classes.find((v, k))] = d
    order: list[Axis] = []
    for v in results:
        for k, d in enumerate(_shape(v)):
            root = classes.find((v, k))
            if d > 1 and root not in reduced_roots and root not in order:
                order.append(root)
    grid = len(order)
    for a in [*reduced, *contracted]:
        root = classes.find(a)
        if root not in order and extent.get(root, 1) > 1:
            order.append(root)
    index = {root: k for k, root in enumerate(order)}
    loop_of = {axis: index[classes.find(axis)] for axis in list(classes.parent)
               if classes.find(axis) in index}
    for v in [*block.args, *(r for i in block.instrs for r in i.results)]:
        for k in range(len(_shape(v))):
            if classes.find((v, k)) in index:
                loop_of[(v, k)] = index[classes.find((v, k))]
    return IterationSpace(
        tuple(extent[r] for r in order),
        tuple("grid" if k < grid else "seq" for k in range(len(order))),
        loop_of,
        frozenset(index[classes.find(a)] for a in contracted if classes.find(a) in index))
