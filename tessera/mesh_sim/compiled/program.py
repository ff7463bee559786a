"""The per-device program of a graph function placed on a mesh.

:func:`mesh_program` takes the placed, collective-inserted Graph IR
(``shard-propagation``), evaluates its partial sums where the mesh simulator does
(:mod:`.partials`), lets the broadcasts that local slices cut make the pieces directly
(:mod:`.sink`) and cuts it at its collectives. Each *segment* between two
collectives becomes, for each group of devices whose blocks have the same shapes
(:func:`~.localize.device_groups`), an unplaced graph function on the blocks, which is
scheduled and fused into kernels (``schedule_module``) and generated into Tile IR
(``schedule_to_tile``). The collectives stay between the segments as
``schedule.collective`` steps holding the placed graph collectives they run.

A :class:`DeviceProgram` is what the devices of one group run: its ``steps`` (a
:class:`Segment` of kernels, or a :class:`Step` collective), its ``schedule`` (the whole
per-device ``schedule.func``: kernels and collectives in order) and its ``kernels``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from tessera.dist.core.mesh import Mesh
from tessera.ir.core import Block, Function, Instr, IRRegion, Module, Value, clone_block
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.dialects.graph.collective import Collective
from tessera.ir.transforms.schedule import schedule_module
from tessera.ir.transforms.to_tile import TileProgram, schedule_to_tile
from tessera.ir.types import TensorType
from tessera.ir.verifier import verify_function
from tessera.mesh_sim.compiled.localize import device_groups, local_function, local_type
from tessera.mesh_sim.compiled.partials import complete_partials
from tessera.mesh_sim.compiled.sink import sink_shards


@dataclass
class Segment:
    """The kernels between two collectives: their graph function on one device's blocks,
    its schedule and tile program, and the placed values it reads and writes."""

    graph: Function
    schedule: Function
    tile: TileProgram
    inputs: list[Value]
    outputs: list[Value]


@dataclass
class Step:
    """A collective between segments: the placed graph instruction it runs."""

    instr: Instr
    label: str


@dataclass
class DeviceProgram:
    """The program the devices of one group run (their blocks have equal shapes)."""

    devices: tuple[int, ...]
    steps: list[Segment | Step]
    schedule: Function
    #: the lowered programs of each segment by PTX target, made on first use
    targets: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def segments(self) -> list[Segment]:
        return [s for s in self.steps if isinstance(s, Segment)]

    @property
    def kernels(self) -> list[tuple[Function, tuple[int, ...]]]:
        """The ``tile.kernel`` functions and grids, in launch order."""
        return [(s.tile.module.functions[launch.kernel], launch.grid)
                for s in self.segments for launch in s.tile.launches]


@dataclass
class MeshProgram:
    """A placed graph function compiled per device (see the module docstring)."""

    function: Function
    mesh: Mesh
    mode: str
    groups: list[DeviceProgram]

    def group_of(self, device: int) -> DeviceProgram:
        """The program ``device`` runs."""
        return next(g for g in self.groups if device in g.devices)


def _cut(fn: Function) -> list[list[Instr] | Instr]:
    """``fn``'s instructions (its return excluded) as runs between collectives."""
    parts: list[list[Instr] | Instr] = []
    run: list[Instr] = []
    for instr in fn.body.instrs:
        if instr.op.terminator:
            break
        if isinstance(instr.op, Collective):
            if run:
                parts.append(run)
            parts += [instr]
            run = []
        else:
            run.append(instr)
    if run:
        parts.append(run)
    return parts


def _interface(run: list[Instr], later: set[Value]) -> tuple[list[Value], list[Value]]:
    defined = {r for i in run for r in i.results}
    inputs: list[Value] = []
    for instr in run:
        for v in instr.operands:
            if v not in defined and v not in inputs:
                inputs.append(v)
    outputs = [r for i in run for r in i.results if r in later]
    return inputs, outputs


def _segment(fn: Function, run: list[Instr], later: set[Value], mesh: Mesh, device: int,
             first_label: int) -> Segment:
    inputs, outputs = _interface(run, later)
    graph = local_function(fn.name, run, inputs, outputs, mesh, device)
    verify_function(graph)
    scheduled = schedule_module(Module(fn.name, {fn.name: graph})).functions[fn.name]
    for k, instr in enumerate(schedule_ops.kernels(scheduled)):
        instr.op = dataclasses.replace(instr.op, label=f"k{first_label + k}")  # type: ignore[call-arg]
    return Segment(graph, scheduled, schedule_to_tile(scheduled), inputs, outputs)


def _device_program(fn: Function, mesh: Mesh, devices: tuple[int, ...]) -> DeviceProgram:
    parts = _cut(fn)
    used_after: list[set[Value]] = []
    seen: set[Value] = set(fn.body.terminator.operands)  # type: ignore[union-attr]
    for part in reversed(parts):
        used_after.append(set(seen))
        for instr in [part] if isinstance(part, Instr) else part:
            seen.update(instr.operands)
    used_after.reverse()
    steps: list[Segment | Step] = []
    kernels = collectives = 0
    for part, later in zip(parts, used_after):
        if isinstance(part, Instr):
            steps.append(Step(part, f"c{collectives}"))
            collectives += 1
        else:
            steps.append(_segment(fn, part, later, mesh, devices[0], kernels))
            kernels += len(schedule_ops.kernels(steps[-1].schedule))  # type: ignore[union-attr]
    return DeviceProgram(devices, steps, per_device_schedule(fn, steps, mesh, devices[0]))


def per_device_schedule(fn: Function, steps: list[Segment | Step], mesh: Mesh,
                        device: int) -> Function:
    """One ``schedule.func`` of a device's kernels and collectives, in order."""
    body = Block()
    env: dict[Value, Value] = {}
    for a in fn.args:
        assert isinstance(a.type, TensorType)
        env[a] = body.add_arg(local_type(a.type, mesh, device), a.hint)
    for step in steps:
        if isinstance(step, Segment):
            inner: dict[Value, Value] = {a: env[v] for a, v in zip(step.schedule.args,
                                                                   step.inputs)}
            for instr in schedule_ops.kernels(step.schedule):
                regions = [IRRegion([clone_block(b, {}) for b in r.blocks])
                           for r in instr.regions]
                copy = Instr(instr.op, [inner[v] for v in instr.operands], [], regions,
                             instr.loc)
                copy.results = [Value(r.type, copy, r.hint) for r in instr.results]
                inner.update(zip(instr.results, copy.results))
                body.append(copy)
            term = step.schedule.body.terminator
            assert term is not None
            env.update((v, inner[r]) for v, r in zip(step.outputs, term.operands))
            continue
        instr = step.instr
        region = Block()
        arg = region.add_arg(instr.operands[0].type, instr.operands[0].hint)
        inside = Instr(instr.op, [arg], [], [], instr.loc)
        inside.results = [Value(r.type, inside, r.hint) for r in instr.results]
        region.append(inside)
        region.append(Instr(schedule_ops.Yield(), list(inside.results), [], [], instr.loc))
        op = schedule_ops.ScheduledCollective(step.label)
        copy = Instr(op, [env[instr.operands[0]]], [], [IRRegion([region])], instr.loc)
        result = instr.results[0]
        assert isinstance(result.type, TensorType)
        copy.results = [Value(local_type(result.type, mesh, device), copy, result.hint)]
        env[result] = copy.results[0]
        body.append(copy)
    term = fn.body.terminator
    assert term is not None
    body.append(Instr(schedule_ops.Return(), [env[v] for v in term.operands], [], [],
                      term.loc))
    out = Function(fn.name, body, [v.type for v in body.instrs[-1].operands],
                   schedule_ops.FUNC, {}, fn.loc)
    verify_function(out)
    schedule_ops.check_function(out, collectives=True)
    return out


def mesh_program(fn: Function, mesh: Mesh, mode: str = "exact") -> MeshProgram:
    """The per-device program of the placed function ``fn`` on ``mesh``."""
    completed = sink_shards(complete_partials(fn, mode))
    groups = [_device_program(completed, mesh, devices)
              for devices in device_groups(completed, mesh)]
    return MeshProgram(completed, mesh, mode, groups)


__all__ = ["DeviceProgram", "MeshProgram", "Segment", "Step", "mesh_program",
           "per_device_schedule"]
