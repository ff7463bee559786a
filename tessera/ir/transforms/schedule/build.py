"""Between a Graph IR function and its kernels: build kernels from groups of graph
instructions, and inline a scheduled function's kernels back into one graph body.

A *group* is a list of top-level instructions of a graph function that become one
kernel. Index maps (constants, broadcasts, transposes, reshapes, slices) may be in
several groups: each kernel that reads through one computes its own copy, which costs
no memory traffic.
"""

from __future__ import annotations

from collections.abc import Sequence

from tessera.ir.core import Block, Function, Instr, IRRegion, Value, clone_block
from tessera.ir.dialects import graph as graph_ops
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.transforms.cse import eliminate_common
from tessera.ir.transforms.dce import eliminate_dead

#: ops that only re-index their operand (or are constants): copied into every kernel
#: that reads them instead of being launched on their own
INDEX_MAPS = (graph_ops.Constant, graph_ops.Broadcast, graph_ops.Transpose,
              graph_ops.Reshape, graph_ops.Slice)


def is_index_map(instr: Instr) -> bool:
    """Whether ``instr`` only re-indexes (or is a constant)."""
    return isinstance(instr.op, INDEX_MAPS)


def graph_body(fn: Function) -> Function:
    """``fn`` as a Graph IR function: a ``schedule.func`` has its kernels inlined (the
    copies of index maps merged again); a ``graph.func`` is copied."""
    env: dict[Value, Value] = {}
    body = clone_block(fn.body, env)
    out = Function(fn.name, body, list(fn.result_types), "graph.func", dict(fn.attrs), fn.loc)
    if fn.kind != schedule_ops.FUNC:
        return out
    flat = Block(list(body.args))
    names: dict[Value, Value] = {}
    for instr in body.instrs:
        operands = [names.get(v, v) for v in instr.operands]
        if isinstance(instr.op, schedule_ops.ScheduledKernel):
            inner = instr.regions[0].block
            inline: dict[Value, Value] = dict(zip(inner.args, operands))
            for k in inner.instrs[:-1]:
                k.operands = [inline.get(v, v) for v in k.operands]
                flat.append(k)
            names.update((r, inline.get(y, y))
                         for r, y in zip(instr.results, inner.instrs[-1].operands))
        else:  # schedule.return
            flat.append(Instr(graph_ops.Return(), operands, [], [], instr.loc))
    out.body = flat
    eliminate_common(flat)
    eliminate_dead(flat)
    return out


def inline_custom(fn: Function) -> Function:
    """``fn`` with every ``graph.custom`` replaced by its region (the primal body, which
    is what the call computes; the derivative rule matters only to autodiff), so the
    ops inside, kernel calls included, are scheduled like the others."""
    if not any(isinstance(i.op, graph_ops.Custom) for i in fn.body.instrs):
        return fn
    env: dict[Value, Value] = {}
    body = Block([])
    for arg in fn.body.args:
        env[arg] = body.add_arg(arg.type, arg.hint)
    _inline_into(body, fn.body, env)
    return Function(fn.name, body, list(fn.result_types), fn.kind, dict(fn.attrs), fn.loc)


def _inline_into(target: Block, source: Block, env: dict[Value, Value]) -> list[Value]:
    """Append ``source``'s instructions to ``target`` (custom calls inlined, recursively)
    and return the values its terminator passes on."""
    for instr in source.instrs:
        operands = [env.get(v, v) for v in instr.operands]
        if isinstance(instr.op, graph_ops.Custom):
            inner = instr.regions[0].block
            env.update(zip(inner.args, operands))
            env.update(zip(instr.results, _inline_into(target, inner, env)))
            continue
        if instr.op.terminator and source is not target and isinstance(instr.op,
                                                                         graph_ops.Yield):
            return operands
        regions = [IRRegion([clone_block(b, dict(env)) for b in r.blocks])
                   for r in instr.regions]
        copy = Instr(instr.op, operands, [], regions, instr.loc)
        copy.results = [Value(r.type, copy, r.hint) for r in instr.results]
        env.update(zip(instr.results, copy.results))
        target.append(copy)
    return []


def build_schedule(fn: Function, groups: Sequence[Sequence[Instr]]) -> Function:
    """A ``schedule.func`` computing ``fn`` (a graph function) with one kernel per group.

    Every top-level instruction of ``fn`` but its return must be in at least one group,
    and only index maps in more than one. Kernels are emitted in a topological order,
    earliest first; kernel ``k`` is labelled ``"k<k>"``.
    """
    position = {instr: k for k, instr in enumerate(fn.body.instrs)}
    groups = [sorted(set(g), key=position.__getitem__) for g in groups if g]
    term = fn.body.terminator
    assert term is not None
    members: dict[Instr, list[int]] = {}
    for k, group in enumerate(groups):
        for instr in group:
            members.setdefault(instr, []).append(k)
    owner: dict[Value, int] = {}
    for instr, ks in members.items():
        for r in instr.results:
            owner[r] = ks[0]
    needed: list[set[Value]] = [set() for _ in groups]
    for k, group in enumerate(groups):
        for instr in group:
            for v in instr.operands:
                if v in owner and k not in members[v.owner]:  # type: ignore[index]
                    needed[owner[v]].add(v)
    for v in term.operands:
        if v in owner:
            needed[owner[v]].add(v)
    order = _topological(groups, owner, members, position)
    env: dict[Value, Value] = {}
    body = Block()
    for arg in fn.args:
        env[arg] = body.add_arg(arg.type, arg.hint)
    for label, k in enumerate(order):
        _emit(body, groups[k], needed[k], env, f"k{label}")
    body.append(Instr(schedule_ops.Return(), [env[v] for v in term.operands], [], [],
                      term.loc))
    for instr in body.instrs:
        instr.parent = body
    return Function(fn.name, body, list(fn.result_types), schedule_ops.FUNC, dict(fn.attrs),
                    fn.loc)


def _topological(groups: Sequence[Sequence[Instr]], owner: dict[Value, int],
                 members: dict[Instr, list[int]], position: dict[Instr, int]) -> list[int]:
    deps: list[set[int]] = [set() for _ in groups]
    for k, group in enumerate(groups):
        for instr in group:
            for v in instr.operands:
                if v in owner and k not in members[v.owner]:  # type: ignore[index]
                    deps[k].add(owner[v])
    done: list[int] = []
    left = set(range(len(groups)))
    while left:
        ready = [k for k in left if deps[k] <= set(done)]
        k = min(ready, key=lambda j: min(position[i] for i in groups[j]))
        done.append(k)
        left.remove(k)
    return done


def _emit(body: Block, group: Sequence[Instr], outputs: set[Value], env: dict[Value, Value],
          label: str) -> None:
    """Append one kernel computing ``group`` to ``body``."""
    defined = {r for instr in group for r in instr.results}
    inputs: list[Value] = []
    for instr in group:
        for v in instr.operands:
            if v not in defined and v not in inputs:
                inputs.append(v)
    region = Block()
    inner: dict[Value, Value] = {v: region.add_arg(v.type, v.hint) for v in inputs}
    staged = Block()
    staged.instrs = list(group)
    copy = clone_block(staged, inner)
    for instr in copy.instrs:
        region.append(instr)
    results = [r for instr in group for r in instr.results if r in outputs]
    region.append(Instr(schedule_ops.Yield(), [inner[r] for r in results], [], [],
                        group[-1].loc))
    space = schedule_ops.iteration_space(region, region.instrs[-1].operands)
    op = schedule_ops.ScheduledKernel(label, space.extents, space.kinds)
    kernel = Instr(op, [env[v] for v in inputs], [], [IRRegion([region])], group[-1].loc)
    kernel.results = [Value(r.type, kernel, r.hint) for r in results]
    env.update(zip(results, kernel.results))
    body.append(kernel)
