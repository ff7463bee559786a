"""What ``ts.jit(f).lower(*args)`` and the ``"tile"`` and ``"target"`` backends of
``ts.jit`` show and run for a graph function placed on a mesh (DistTensor arguments).

The placed Graph IR is cut at its collectives and each segment is scheduled, fused and
generated on one device's blocks (:mod:`.program`); ``.kernels`` lists a device's
kernels (the same on every device whose blocks have the same shapes, as the repr
says), ``.ir("schedule")`` is the per-device ``schedule.func`` with its
``schedule.collective`` steps after a comment naming its devices, and a run executes
every device's kernels with the collectives run by the mesh simulator between them
(:mod:`.run`; docs/schedule.md, "On a mesh").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.dist.core.mesh import Mesh
from tessera.errors import UnsupportedError
from tessera.frontend.graph.lowered import GeneratedKernel
from tessera.frontend.graph.pytree import unflatten
from tessera.frontend.graph.tensor import Tensor
from tessera.ir.core import Function, Module
from tessera.ir.transforms.sharding.propagation import propagate_function
from tessera.ir.types import Sharding, TensorType
from tessera.ir.verifier import verify_function
from tessera.mesh_sim.compiled.program import MeshProgram, Segment, Step, mesh_program
from tessera.mesh_sim.compiled.run import run_mesh_program
from tessera.mesh_sim.spmd.execute import place_arguments

if TYPE_CHECKING:
    from tessera.frontend.graph.jit import Compiled


def _place(fn: Function) -> Any:
    """Place ``fn``'s unplaced arguments as replicated (as a plain array passed with
    DistTensors is) and propagate; returns the mesh its placements name."""
    sharding = next(a.type.sharding for a in fn.args if isinstance(a.type, TensorType)
                    and a.type.sharding is not None)
    pairs = sharding.mesh
    if any(isinstance(a.type, TensorType) and a.type.sharding is None for a in fn.args):
        for a in fn.args:
            if isinstance(a.type, TensorType) and a.type.sharding is None:
                a.type = a.type.placed(Sharding.replicated(pairs, a.type.rank))
        propagate_function(fn)
        verify_function(fn)
    return Mesh(tuple(a for a, _ in pairs), shape=tuple(n for _, n in pairs))


def mesh_program_of(compiled: Compiled, mode: str) -> MeshProgram:
    """The per-device program of a placed specialisation (made once per mode)."""
    hit = compiled.mesh_programs.get(mode)
    if hit is None:
        mesh = _place(compiled.function)
        hit = compiled.mesh_programs[mode] = mesh_program(compiled.function, mesh, mode)
    program: MeshProgram = hit
    return program


def run_on_mesh(compiled: Compiled, inputs: list[Tensor], mode: str, backend: str,
                target: str) -> Any:
    """Run a placed specialisation's kernels on every device of its mesh."""
    if backend == "cuda":
        raise UnsupportedError("backend 'cuda' runs one GPU; a function placed on a mesh "
                               "runs its kernels per device in the mesh simulator",
                               hint="use backend='tile' or 'target'")
    args = place_arguments(compiled.function, inputs)
    results = iter(run_mesh_program(mesh_program_of(compiled, mode), args, backend=backend,
                                    target=target))
    n = compiled.out_tree.num_leaves
    leaves = [compiled.static_outputs[k] if k in compiled.static_outputs else next(results)
              for k in range(n)]
    return unflatten(compiled.out_tree, leaves)


def devices_text(devices: tuple[int, ...], size: int) -> str:
    """``devices 0-7 (all 8)``, ``devices 0, 2``: a group of devices, briefly."""
    if list(devices) == list(range(devices[0], devices[-1] + 1)) and len(devices) > 2:
        span = f"devices {devices[0]}-{devices[-1]}"
    else:
        span = ("device " if len(devices) == 1 else "devices ") + ", ".join(map(str, devices))
    return span + (f" (all {size})" if len(devices) == size else "")


@dataclass
class DeviceKernels:
    """The kernels of one group of devices (their blocks have the same shapes)."""

    devices: tuple[int, ...]
    kernels: list[GeneratedKernel]


class MeshKernels(list):  # type: ignore[type-arg]
    """Device 0's kernels in launch order; ``groups`` lists every group of devices with
    its own kernels (one group when every device's blocks have the same shapes)."""

    def __init__(self, groups: list[DeviceKernels], size: int) -> None:
        super().__init__(groups[0].kernels)
        self.groups = groups
        self.size = size

    def __repr__(self) -> str:
        parts = [f"{devices_text(g.devices, self.size)}: "
                 f"{', '.join(k.name for k in g.kernels) or 'no kernels'}"
                 for g in self.groups]
        same = " (the same kernels on every device)" if len(self.groups) == 1 else ""
        return f"<kernels of {len(self.groups)} device program(s){same}; {'; '.join(parts)}>"


def mesh_kernels(program: MeshProgram) -> MeshKernels:
    """The generated kernels of every device program."""
    groups = [DeviceKernels(g.devices, [GeneratedKernel(f, grid) for f, grid in g.kernels])
              for g in program.groups]
    return MeshKernels(groups, program.mesh.size)


def mesh_stage_text(program: MeshProgram, stage: str, target: str) -> str:
    """``ir(stage)`` of a placed specialisation: each device program's text after a
    comment naming its devices."""
    out = []
    for g in program.groups:
        head = f"// {devices_text(g.devices, program.mesh.size)} run this program"
        if stage == "schedule":
            body = str(Module(g.schedule.name, {g.schedule.name: g.schedule}))
        else:
            from tessera.frontend.graph.lowered_target import target_program

            parts = []
            for step in g.steps:
                if isinstance(step, Segment):
                    parts.append(str(step.tile) if stage == "tile" else
                                 target_program(step.tile, step.graph, target).text())
                else:
                    parts.append(f"// collective {step.label}: {step.instr.op.name} "
                                 f"{step.instr.operands[0].type} -> "
                                 f"{step.instr.results[0].type}")
            body = "\n".join(parts)
        out.append(f"{head}\n{body}")
    return "\n".join(out)


def describe(name: str, program: MeshProgram) -> str:
    """The repr of a placed specialisation lowered per device."""
    mesh = ", ".join(f"{a}={n}" for a, n in zip(program.mesh.axes, program.mesh.shape))
    g = program.groups[0]
    steps = sum(isinstance(s, Step) for s in g.steps)
    same = f"the same on all {program.mesh.size} devices" if len(program.groups) == 1 else \
        f"{len(program.groups)} device programs"
    return (f"<tessera lowered {name} on mesh<{mesh}>: {len(g.kernels)} kernel(s) and "
            f"{steps} collective(s) per device, {same}>")


__all__ = ["DeviceKernels", "MeshKernels", "describe", "mesh_kernels", "mesh_program_of",
           "mesh_stage_text", "run_on_mesh"]
