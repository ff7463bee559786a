"""``fuse``: group the ops of each scheduled function into as few kernels as the
fusion rules allow (docs/schedule.md lists the rules with examples).

The pass inlines the function's kernels back into one graph body and partitions its
*compute* ops (elementwise, reductions, softmax, matmuls) into groups; index maps
(constants, broadcasts, transposes, reshapes, slices) are copied into every group that
reads them. Every other op (FFTs, collectives, custom calls, embeds) stays a kernel of
its own; a ``graph.kernel_call`` (a hand-written tile kernel) is launched as it is, so
it never fuses, and what it reads through index maps is computed by a kernel first.
Two groups merge when

1. *siblings*: two matmuls read the same left operand, with right operands and results
   of one type (Q, K and V projections): the operand is then read once;
2. *producer into consumer*, visiting consumers in program order, when the merged
   group obeys every rule below.

* **acyclic**: no path leaves the merged group and comes back into it;
* **contraction**: a matmul of the consumer may contract over a loop of the producer
  only when the producer reduces that loop itself (its tile already holds whole rows,
  as softmax's rows feed ``P @ V``); otherwise the producer's parallel loop would have
  to become sequential (``gelu(x @ W1) @ W2`` stays two kernels);
* **rows stay parallel**: when the consumer reduces a grid loop of a producer that
  holds a matmul (softmax of ``Q @ K^T``, a norm of ``x @ W + r``), the matmul's row
  and batch loops stay grid loops; and a merge never leaves a consumer that had grid
  loops with none (sums of ``exp(x)`` over rows and over columns stay two kernels);
* **recompute**: a producer whose values lie on fewer grid loops than the merged
  kernel is computed again for every tile of the others. That costs nothing when
  those loops are one tile long (at most ``ONE_TILE``: the head dimension of
  ``P @ V``), and is allowed otherwise only for producers without a matmul whose
  values are all consumed inside (a norm feeding matmuls, a bias computed from a
  vector);
* **bytes**: the merged kernel moves no more global bytes than the two apart
  (:func:`~tessera.ir.transforms.schedule.cost.traffic`);
* **capacity**: the merged kernel's smallest working set fits the target's shared
  memory per block (:func:`~tessera.ir.transforms.schedule.cost.working_set`).

Fusion never changes an op: each kernel's region holds the graph ops it computes, so
the scheduled program means what the graph program means (exact mode keeps its bits).
"""

from __future__ import annotations

from collections.abc import Iterable

from tessera.arch.limits import H100, TargetLimits
from tessera.ir.core import Block, Function, Instr, Module, Value
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.dialects.schedule.space import IterationSpace, iteration_space
from tessera.ir.passes import register_pass
from tessera.ir.transforms.schedule.build import build_schedule, graph_body, is_index_map
from tessera.ir.transforms.schedule.cost import ONE_TILE, traffic, working_set

#: ops that fuse (with index maps, which are copied into their users' kernels)
FUSIBLE = (graph_ops.Unary, graph_ops.Binary, graph_ops.ToReal, graph_ops.Where,
           graph_ops.Cast, graph_ops.Reduce, graph_ops.Softmax, graph_ops.Mse,
           graph_ops.MatMul)


class FusionGraph:
    """The compute ops of one graph body with their producers and consumers, seen
    through index maps, and the current partition into groups."""

    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.instrs = [i for i in fn.body.instrs if not i.op.terminator]
        self.position = {instr: k for k, instr in enumerate(self.instrs)}
        self.users: dict[Value, list[Instr]] = {}
        for instr in self.instrs:
            for v in instr.operands:
                self.users.setdefault(v, []).append(instr)
        term = fn.body.terminator
        self.returned = set(term.operands) if term is not None else set()
        self.compute = [i for i in self.instrs if not is_index_map(i)]
        self.group: dict[Instr, frozenset[Instr]] = {i: frozenset([i]) for i in self.compute}
        # a group's space depends on its members alone (users and returns never change
        # while groups merge), and every candidate merge asks for several of them
        self._spaces: dict[frozenset[Instr], tuple[Block, IterationSpace]] = {}

    def producers(self, instr: Instr) -> list[Instr]:
        """The compute ops whose results reach ``instr``'s operands through index maps."""
        found: list[Instr] = []
        stack = list(instr.operands)
        while stack:
            owner = stack.pop().owner
            if not isinstance(owner, Instr):
                continue
            if is_index_map(owner):
                stack += owner.operands
            elif owner not in found:
                found.append(owner)
        return found

    def consumers(self, instr: Instr) -> tuple[list[Instr], bool]:
        """The compute ops reading ``instr``'s results through index maps, and whether
        one of them is returned by the function (through index maps or directly)."""
        found: list[Instr] = []
        returned = False
        stack = list(instr.results)
        while stack:
            v = stack.pop()
            returned |= v in self.returned or not self.users.get(v)
            for user in self.users.get(v, []):
                if is_index_map(user):
                    stack += user.results
                elif user not in found:
                    found.append(user)
        return found, returned

    def with_maps(self, group: Iterable[Instr]) -> list[Instr]:
        """``group`` and the index maps its ops read through, in program order."""
        members = set(group)
        stack = [v for i in members for v in i.operands]
        while stack:
            owner = stack.pop().owner
            if isinstance(owner, Instr) and is_index_map(owner) and owner not in members:
                members.add(owner)
                stack += owner.operands
        return sorted(members, key=self.position.__getitem__)

    def outputs(self, group: frozenset[Instr]) -> list[Value]:
        """The values of ``group`` that some op outside it (or the return) reads."""
        out = []
        for instr in sorted(group, key=self.position.__getitem__):
            users, returned = self.consumers(instr)
            if returned or any(u not in group for u in users):
                out += instr.results
        return out

    def space(self, group: frozenset[Instr]) -> tuple[Block, IterationSpace]:
        """The ops of ``group`` (with their index maps) as a block, and its iteration
        space; computed once per group. The block is shared: read it, never change it."""
        found = self._spaces.get(group)
        if found is None:
            block = Block()
            block.instrs = self.with_maps(group)
            found = self._spaces[group] = block, iteration_space(block, self.outputs(group))
        return found

    def inputs(self, group: frozenset[Instr]) -> list[Value]:
        members = set(self.with_maps(group))
        return [v for i in members for v in i.operands
                if not isinstance(v.owner, Instr) or v.owner not in members]

    def reaches(self, sources: Iterable[Instr], group: frozenset[Instr]) -> bool:
        """Whether a path from ``sources`` (outside ``group``) enters ``group``."""
        seen: set[Instr] = set()
        stack = list(sources)
        while stack:
            instr = stack.pop()
            if instr in group:
                return True
            if instr in seen:
                continue
            seen.add(instr)
            stack += self.consumers(instr)[0]
        return False

    def merge(self, a: frozenset[Instr], b: frozenset[Instr]) -> None:
        merged = a | b
        for instr in merged:
            self.group[instr] = merged


def _matmuls(group: Iterable[Instr]) -> list[Instr]:
    return [i for i in group if isinstance(i.op, graph_ops.MatMul)]


def legal(graph: FusionGraph, producer: frozenset[Instr], consumer: frozenset[Instr],
          limits: TargetLimits) -> bool:
    """Whether merging ``producer`` into ``consumer`` obeys the rules of the module."""
    merged = producer | consumer
    if not all(isinstance(i.op, FUSIBLE) for i in merged):
        return False
    exits = {c for i in merged for c in graph.consumers(i)[0] if c not in merged}
    if graph.reaches(exits, merged):
        return False  # acyclic
    block, space = graph.space(merged)
    values = {r for i in producer for r in i.results}
    return (_contraction(graph.space(producer)[1], space, values)
            and _rows_stay_parallel(graph, producer, consumer, space)
            and _recompute(graph, producer, merged, space, values)
            and _bytes(graph, producer, consumer, merged)
            and working_set(block, space) <= limits.shared_per_block)


def _contraction(alone: IterationSpace, space: IterationSpace, values: set[Value]) -> bool:
    """No matmul of the merged kernel contracts over a loop the producer runs as a grid."""
    return not any(v in values and alone.kinds[loop] == "grid"
                   and space.loop_of.get((v, axis)) in space.contracted
                   for (v, axis), loop in alone.loop_of.items())


def _rows_stay_parallel(graph: FusionGraph, producer: frozenset[Instr],
                        consumer: frozenset[Instr], space: IterationSpace) -> bool:
    """The producer's matmuls keep their row and batch loops as grid loops, and a
    consumer with grid loops keeps at least one."""
    if "grid" not in space.kinds and "grid" in graph.space(consumer)[1].kinds:
        return False
    for mm in _matmuls(producer):
        out = mm.results[0]
        rows = [space.loop_of.get((out, k)) for k in range(out.type.rank - 1)]
        if any(k is not None and space.kinds[k] != "grid" for k in rows):
            return False
    return True


def _recompute(graph: FusionGraph, producer: frozenset[Instr], merged: frozenset[Instr],
               space: IterationSpace, values: set[Value]) -> bool:
    """A producer computed again per tile of grid loops it does not run over is cheap:
    those loops are one tile long, or it holds no matmul and its values stay inside."""
    grid = {k for k, kind in enumerate(space.kinds) if kind == "grid"}
    covered = set().union(*(space.grid_loops(v) for v in values))
    if not any(space.extents[k] > ONE_TILE for k in grid - covered):
        return True
    return not _matmuls(producer) and not values & set(graph.outputs(merged))


def _bytes(graph: FusionGraph, producer: frozenset[Instr], consumer: frozenset[Instr],
           merged: frozenset[Instr]) -> bool:
    """The merged kernel moves no more global bytes than the two kernels apart."""
    apart = sum(traffic(graph.inputs(g), graph.outputs(g)) for g in (producer, consumer))
    return traffic(graph.inputs(merged), graph.outputs(merged)) <= apart


def fuse_groups(fn: Function, limits: TargetLimits = H100) -> list[list[Instr]]:
    """The groups of a graph function's ops that the rules allow (see the module)."""
    graph = FusionGraph(fn)
    by_operand: dict[Value, list[Instr]] = {}
    for mm in _matmuls(graph.compute):
        by_operand.setdefault(mm.operands[0], []).append(mm)
    for siblings in by_operand.values():
        for other in siblings[1:]:
            first = graph.group[siblings[0]]
            same = other.operands[1].type == siblings[0].operands[1].type and \
                other.op == siblings[0].op
            merged = first | graph.group[other]
            exits = {c for i in merged for c in graph.consumers(i)[0] if c not in merged}
            if same and not graph.reaches(exits, merged):
                graph.merge(first, graph.group[other])
    for consumer in graph.compute:
        for producer in graph.producers(consumer):
            p, c = graph.group[producer], graph.group[consumer]
            if p is not c and legal(graph, p, c, limits):
                graph.merge(p, c)
    groups: list[list[Instr]] = []
    calls = [i for i in graph.compute if isinstance(i.op, graph_ops.KernelCall)]
    for group in dict.fromkeys(graph.group[i] for i in graph.compute):
        # a kernel call reads whole buffers: what it reads through index maps is
        # computed by a kernel of its own first
        groups.append(sorted(group, key=graph.position.__getitem__)
                      if any(i in calls for i in group) else graph.with_maps(group))
    covered = {i for g in groups for i in g}
    for call in calls:
        for v in call.operands:
            owner = v.owner
            if isinstance(owner, Instr) and is_index_map(owner) and owner not in covered:
                groups.append(graph.with_maps([owner]))
                covered.update(groups[-1])
    for instr in graph.instrs:
        if is_index_map(instr) and any(v in graph.returned for v in instr.results):
            groups.append(graph.with_maps([instr]))
    return groups


@register_pass
class Fuse:
    """Fuse each scheduled function's ops into as few kernels as the fusion rules allow."""

    name = "fuse"

    def __init__(self, limits: TargetLimits = H100) -> None:
        self.limits = limits

    def apply(self, module: Module) -> Module:
        for name, fn in list(module.functions.items()):
            if fn.kind != schedule_ops.FUNC:
                continue
            flat = graph_body(fn)
            module.functions[name] = build_schedule(flat, fuse_groups(flat, self.limits))
        return module
