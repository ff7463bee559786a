"""``ts.jit(f).lower(*args)``: a graph function compiled for one signature down the
stack (Graph → Schedule → Tile IR), as JAX's ``jit(f).lower(...)`` is.

:class:`CompiledProgram` holds every stage of one specialisation: ``ir("graph")``,
``ir("schedule")``, ``ir("tile")`` (the kernels and the host program that launches
them), ``kernels`` (each with its Tile IR text) and ``run(*args, backend=...)``. The
backends:

* ``"interp"``: the graph interpreter, the definition of the program's meaning;
* ``"tile"``: the generated kernels in the tile simulator, with its sanitizers; in
  exact mode the results have the graph interpreter's bits, and an op the generation
  cannot implement that way is a :class:`~tessera.ir.transforms.to_tile.TileGenerationError`
  naming the op and the user's line;
* ``"target"``: every kernel lowered to Target IR (for ``target``, sm_90a by default)
  and run through the host program by the Target IR interpreter on the CPU: what the
  PTX computes, with the tile simulator's (so the graph interpreter's) bits;
* ``"cuda"``: the kernels assembled for GPU 0's architecture and launched through the
  CUDA driver (a :class:`~tessera.backend.ptx.driver.GpuUnavailable` where there is no
  GPU).

A function placed on a mesh (DistTensor arguments) is compiled per device: its stages,
kernels and runs are those of :mod:`tessera.mesh_sim.compiled.stages` (docs/schedule.md,
"On a mesh").

``ir("target", target=...)`` and ``ptx(target=...)`` are the lowered kernels' texts
(:mod:`tessera.frontend.graph.lowered_target`); ``seconds`` times each stage of the
compilation from Python to PTX.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.errors import ArgumentError, StageError, UnsupportedError
from tessera.frontend.graph.pytree import flatten
from tessera.frontend.graph.tensor import Tensor
from tessera.ir.core import Function, Module

if TYPE_CHECKING:
    from tessera.frontend.graph.jit import Compiled, JitFunction
    from tessera.frontend.graph.lowered_target import PtxModules, TargetProgram
    from tessera.ir.transforms.to_tile import TileProgram

#: where a graph function can run
BACKENDS = ("interp", "tile", "target", "cuda")


#: the PTX target of ``backend="target"`` and of ``ir("target")`` / ``ptx()`` by default
DEFAULT_TARGET = "sm_90a"


def on_mesh(compiled: Compiled, inputs: list[Tensor] | None = None) -> bool:
    """Whether a specialisation runs on a mesh (DistTensor arguments, placed types):
    it is compiled per device (:mod:`tessera.mesh_sim.compiled`)."""
    from tessera.frontend.graph.dist_arg import DistArg
    from tessera.ir.types import TensorType

    if inputs is not None and any(isinstance(t, DistArg) for t in inputs):
        return True
    return any(isinstance(a.type, TensorType) and a.type.sharding is not None
               for a in compiled.function.args)


def check_backend(backend: Any) -> str:
    """``backend`` if it is one, else an ArgumentError."""
    if backend not in BACKENDS:
        raise ArgumentError(f"unknown backend {backend!r}", hint=f"use one of {BACKENDS}")
    return str(backend)


@dataclass
class GeneratedKernel:
    """One generated kernel: its ``tile.kernel`` function and launch grid."""

    function: Function
    grid: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.function.name

    @property
    def text(self) -> str:
        """The kernel's Tile IR text."""
        return str(Module(self.name, {self.name: self.function}))

    def __str__(self) -> str:
        return self.text


def tile_program(compiled: Compiled, mode: str = "exact") -> TileProgram:
    """The tile program of a specialisation, generated once and kept with it (a function
    placed on a mesh has one per device group and segment: ``.mesh``)."""
    if on_mesh(compiled):
        raise UnsupportedError(f"@{compiled.function.name} is placed on a mesh: each device "
                               "runs tile programs between collectives",
                               hint="see .mesh, .kernels and .ir('tile') of ts.jit(f).lower()")
    cached = compiled.tile_program if mode != "fast" else compiled.fast_tile_program
    if cached is None:
        from tessera.ir.dialects import schedule as schedule_ops
        from tessera.ir.passes import collector_paused
        from tessera.ir.transforms.schedule import schedule_module
        from tessera.ir.transforms.to_tile import schedule_to_tile

        fn = compiled.function
        with collector_paused():
            t0 = time.perf_counter()
            if fn.kind != schedule_ops.FUNC:
                fn = schedule_module(Module(compiled.module.name, {fn.name: fn}),
                                     mode=mode).functions[fn.name]
            t1 = time.perf_counter()
            cached = schedule_to_tile(fn, mode)
        cached.seconds = {"schedule": t1 - t0, "to_tile": time.perf_counter() - t1}
        if mode == "fast":  # fast mode's kernels may reassociate (online softmax)
            compiled.fast_tile_program = cached
        else:
            compiled.tile_program = cached
    program: TileProgram = cached
    return program


def target_program(compiled: Compiled, target: str) -> TargetProgram:
    """A specialisation's kernels lowered for ``target`` (made once per target)."""
    from tessera.frontend.graph import lowered_target

    return lowered_target.target_program(tile_program(compiled), compiled.function, target)


def run_tile(compiled: Compiled, inputs: list[Tensor], mode: str) -> Any:
    """Run a specialisation's kernels in the tile simulator; the output structure is
    the Python function's (as :func:`~tessera.frontend.graph.jit.run_compiled` builds)."""
    return run_generated(compiled, inputs, mode, "tile")


def run_generated(compiled: Compiled, inputs: list[Tensor], mode: str, backend: str,
                  target: str | None = None) -> Any:
    """Run a specialisation's generated kernels on ``backend`` ("tile", "target" or
    "cuda"); the output structure is the Python function's."""
    from tessera.frontend.graph.jit import rebuild_outputs

    if on_mesh(compiled, inputs):  # every device's kernels, the collectives between them
        from tessera.mesh_sim.compiled.stages import run_on_mesh

        return run_on_mesh(compiled, inputs, mode, backend, target or DEFAULT_TARGET)
    arrays = [t.array for t in inputs]
    if backend == "tile":
        from tessera.interp.tile.program import run_program

        out = run_program(tile_program(compiled, mode), arrays,
                          mode="fast" if mode == "fast" else "checked")
    elif backend == "target":
        out = target_program(compiled, target or DEFAULT_TARGET).run(arrays)
    else:
        from tessera.frontend.graph.lowered_target import device_target

        arch = device_target()  # GpuUnavailable first: no GPU, nothing to compile for
        out = target_program(compiled, arch).run_cuda(arrays)
    return rebuild_outputs(compiled, out)


class CompiledProgram:
    """A graph function lowered for one signature: its stages, kernels and runs."""

    def __init__(self, fn: JitFunction, compiled: Compiled, backend: str) -> None:
        self.fn = fn
        self.compiled = compiled
        self.backend = check_backend(backend)

    @property
    def on_mesh(self) -> bool:
        """Whether the function is placed on a mesh (compiled per device)."""
        return on_mesh(self.compiled)

    @property
    def mesh(self) -> Any:
        """The per-device program of a function placed on a mesh
        (:class:`~tessera.mesh_sim.compiled.MeshProgram`)."""
        from tessera.mesh_sim.compiled.stages import mesh_program_of

        if not self.on_mesh:
            raise UnsupportedError(f"{self.fn.name} is not placed on a mesh",
                                   hint="pass DistTensor arguments (ts.dist)")
        return mesh_program_of(self.compiled, self.fn.mode)

    @property
    def tile(self) -> TileProgram:
        """The kernels and host program (generated on first use)."""
        return tile_program(self.compiled, self.fn.mode)

    @property
    def kernels(self) -> list[GeneratedKernel]:
        """The generated kernels in launch order (on a mesh: device 0's, with every
        device program's in ``.groups``)."""
        if self.on_mesh:
            from tessera.mesh_sim.compiled.stages import mesh_kernels

            return mesh_kernels(self.mesh)
        program = self.tile
        return [GeneratedKernel(program.module.functions[s.kernel], s.grid)
                for s in program.launches]

    def ir(self, stage: str = "graph", *, target: str = DEFAULT_TARGET) -> str:
        """The text of ``stage``: "graph", "schedule", "tile" or "target" (the kernels
        lowered for ``target`` and the host program)."""
        return stage_text(self.compiled, stage, target, self.fn.mode)

    def target(self, target: str = DEFAULT_TARGET) -> TargetProgram:
        """The kernels lowered for ``target`` (``.kernels``, ``.ptx()``, ``.seconds``)."""
        return target_program(self.compiled, target)

    def ptx(self, target: str = DEFAULT_TARGET) -> PtxModules:
        """The PTX of each kernel, by kernel name in launch order (``str()`` joins them)."""
        return target_program(self.compiled, target).ptx()

    def seconds(self, target: str = DEFAULT_TARGET) -> dict[str, float]:
        """Seconds of each compilation stage from the Python function to ``target``'s
        PTX after tracing: schedule, to_tile (generation), lower, verify and render
        (each measured the first time it ran for this specialisation)."""
        return {**self.tile.seconds, **target_program(self.compiled, target).seconds}

    def run(self, *args: Any, backend: str | None = None, target: str | None = None,
            **kwargs: Any) -> Any:
        """Run on ``args`` (of the signature it was lowered for) with ``backend``;
        ``target`` is the PTX target of ``backend="target"`` (sm_90a by default)."""
        from tessera.frontend.graph.jit import run_compiled

        backend = check_backend(backend or self.backend)
        compiled = self.fn.compile(*args, **kwargs)
        if compiled is not self.compiled:
            raise ArgumentError(f"{self.fn.name} was lowered for other argument shapes or "
                                "types", hint="lower it again for these arguments")
        leaves, _ = flatten(list(self.fn._arguments.values()))
        inputs = [x for x in leaves if isinstance(x, Tensor)]
        if backend != "interp":
            return run_generated(compiled, inputs, self.fn.mode, backend, target)
        return run_compiled(compiled, inputs, self.fn.mode)

    def __repr__(self) -> str:
        if self.on_mesh:
            from tessera.mesh_sim.compiled.stages import describe

            return describe(self.fn.name, self.mesh)
        return f"<tessera lowered {self.fn.name}: {len(self.tile.launches)} kernel(s)>"

    def _repr_html_(self) -> str:  # a notebook shows every stage
        from tessera.explain.notebook import program_html

        return program_html(self)


def stage_text(compiled: Compiled, stage: str, target: str = DEFAULT_TARGET,
               mode: str = "exact") -> str:
    """The text of one stage of a specialisation (``ts.inspect_ir`` and ``ir``); the
    later stages of a function placed on a mesh are its per-device programs."""
    if stage == "graph":
        return str(compiled.module)
    if stage in ("schedule", "tile", "target") and on_mesh(compiled):
        from tessera.mesh_sim.compiled.stages import mesh_program_of, mesh_stage_text

        return mesh_stage_text(mesh_program_of(compiled, mode), stage, target)
    if stage == "schedule":
        from tessera.ir.transforms.schedule import schedule_module

        return str(schedule_module(compiled.module, mode=mode))
    if stage == "tile":
        return str(tile_program(compiled, mode))
    if stage == "target":
        return target_program(compiled, target).text()
    raise StageError(f"unknown stage {stage!r} of a lowered function",
                     hint="stages: graph, schedule, tile, target")


__all__ = ["BACKENDS", "DEFAULT_TARGET", "CompiledProgram", "GeneratedKernel", "check_backend",
           "on_mesh", "run_generated", "run_tile", "stage_text", "target_program", "tile_program"]
