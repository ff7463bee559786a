"""Running a :class:`~.program.MeshProgram`: every device's kernels, the collectives
between them.

Each device holds its blocks of the values it has computed. A segment runs on every
device of its group: the device's kernels in the tile simulator (``backend="tile"``)
or lowered to Target IR and run by its interpreter (``"target"``), on the device's
blocks. A collective gathers the devices' blocks into the DistTensor they make up and
runs the placed graph collective on it with the mesh simulator's rule
(:func:`~..spmd.collect.run_collective`: the core collectives, rank order, one
rounding), the same call the simulator's run of the placed graph makes; each device
then takes its block of the result. The results are DistTensors placed as the
function's result types say.

Under an active :func:`~tessera.mesh_sim.profile.profile`, each kernel is recorded on
each device's compute track (named after the kernel, with its work from its graph
ops), and the collectives on the comm tracks, each after what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tessera.dist.core.mesh import Mesh
from tessera.dist.core.tensor import DistTensor
from tessera.ir.core import Function, Value
from tessera.ir.dialects import schedule as schedule_ops
from tessera.ir.types import TensorType
from tessera.mesh_sim.compiled.program import DeviceProgram, MeshProgram, Segment, Step
from tessera.mesh_sim.cost import Work, graph_work
from tessera.mesh_sim.profile import current
from tessera.mesh_sim.spmd.collect import run_collective

#: per placed value, each device's block (None: not held by that device yet)
Blocks = list[Any]


def _dist(v: Value, blocks: Blocks, mesh: Mesh) -> DistTensor:
    """The DistTensor the devices' blocks of ``v`` make up."""
    t = v.type
    assert isinstance(t, TensorType) and t.sharding is not None
    s = t.sharding
    return DistTensor(tuple(int(n) for n in t.shape), t.element, mesh,  # type: ignore[arg-type]
                      s.dims, partial=s.partial_axes,
                      source=lambda key: blocks[mesh.index(key)])


def _split(t: DistTensor) -> Blocks:
    return [t.block(t.block_key(d)) for d in range(t.mesh.size)]


def _kernel_work(segment: Segment, name: str) -> Work:
    """The work of one generated kernel, from the graph ops of its schedule.kernel."""
    for instr in schedule_ops.kernels(segment.schedule):
        if name.endswith("_" + instr.op.label):  # type: ignore[attr-defined]
            block = instr.regions[0].block
            return graph_work(Function(name, block, [v.type for v in block.instrs[-1].operands]))
    raise AssertionError(f"no kernel {name}")


def _run_segment(segment: Segment, group: DeviceProgram, env: dict[Value, Blocks],
                 size: int, mode: str, backend: str, target: str | None) -> None:
    prof = current()
    runner = _runner(segment, mode, backend, target)
    for d in group.devices:
        outs = runner([env[v][d] for v in segment.inputs])
        for v, a in zip(segment.outputs, outs):
            env.setdefault(v, [None] * size)[d] = a
        if prof is not None:
            for launch in segment.tile.launches:
                prof.record_compute(launch.kernel, _kernel_work(segment, launch.kernel),
                                    [d], kind="kernel")


def _runner(segment: Segment, mode: str, backend: str, target: str | None) -> Any:
    """The function that runs a segment's kernels on one device's blocks."""
    if backend == "tile":
        from tessera.interp.tile.program import run_program

        return lambda arrays: run_program(segment.tile, arrays,
                                          mode="fast" if mode == "fast" else "checked")
    from tessera.frontend.graph.lowered_target import target_program

    lowered = target_program(segment.tile, segment.graph, target or "sm_90a")
    return lowered.run


def run_mesh_program(program: MeshProgram, args: Sequence[DistTensor], *,
                     backend: str = "tile", target: str | None = None) -> list[DistTensor]:
    """Run every device's program on ``args`` (placed as the function's arguments);
    the results are DistTensors placed as its result types say."""
    fn = program.function
    mesh = args[0].mesh
    env: dict[Value, Blocks] = {a: _split(x) for a, x in zip(fn.args, args)}
    steps = [g.steps for g in program.groups]
    # every group runs the same cut: segment k of each, then the same collective
    assert len({tuple(type(s) for s in group) for group in steps}) == 1
    for k in range(len(steps[0])):
        first = steps[0][k]
        if isinstance(first, Step):
            out = run_collective(first.instr.op, _dist(first.instr.operands[0],
                                                       env[first.instr.operands[0]], mesh),
                                 first.instr.results[0].type)  # type: ignore[arg-type]
            env[first.instr.results[0]] = _split(out)
            continue
        for group, group_steps in zip(program.groups, steps):
            segment = group_steps[k]
            assert isinstance(segment, Segment)
            _run_segment(segment, group, env, mesh.size, program.mode, backend, target)
    term = fn.body.terminator
    assert term is not None
    return [_result(v, env[v], mesh) for v in term.operands]


def _result(v: Value, blocks: Blocks, mesh: Mesh) -> DistTensor:
    t = _dist(v, blocks, mesh)
    if not t.sharded_axes and not t.partial_axes:  # one block: the global value itself
        return DistTensor(t.shape, t.element, mesh, t.dim_axes,
                          global_array=np.asarray(blocks[0]))
    return t


__all__ = ["run_mesh_program"]
