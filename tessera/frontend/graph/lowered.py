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
* ``"target"``, ``"cuda"``: Target IR and the GPU, not built for graph functions yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tessera.errors import ArgumentError, StageError, UnsupportedError
from tessera.frontend.graph.pytree import flatten
from tessera.frontend.graph.tensor import Tensor
from tessera.ir.core import Function, Module

if TYPE_CHECKING:
    from tessera.frontend.graph.jit import Compiled, JitFunction
    from tessera.ir.transforms.to_tile import TileProgram

#: where a graph function can run
BACKENDS = ("interp", "tile", "target", "cuda")


def check_backend(backend: Any) -> str:
    """``backend`` if it is one, else an ArgumentError; the unbuilt ones raise."""
    if backend not in BACKENDS:
        raise ArgumentError(f"unknown backend {backend!r}", hint=f"use one of {BACKENDS}")
    if backend in ("target", "cuda"):
        raise UnsupportedError(f"backend {backend!r} is not built for graph functions yet: "
                               "their kernels reach Tile IR, not Target IR",
                               hint="use backend='tile' (the tile simulator) or 'interp'")
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


def tile_program(compiled: Compiled) -> TileProgram:
    """The tile program of a specialisation, generated once and kept with it."""
    if compiled.tile_program is None:
        from tessera.ir.transforms.to_tile import lower_module

        compiled.tile_program = lower_module(compiled.module, compiled.function.name)
    program: TileProgram = compiled.tile_program
    return program


def run_tile(compiled: Compiled, inputs: list[Tensor], mode: str) -> Any:
    """Run a specialisation's kernels in the tile simulator; the output structure is
    the Python function's (as :func:`~tessera.frontend.graph.jit.run_compiled` builds)."""
    from tessera.frontend.graph.dist_arg import DistArg
    from tessera.frontend.graph.jit import rebuild_outputs
    from tessera.interp.tile.program import run_program

    if any(isinstance(t, DistArg) for t in inputs):
        raise UnsupportedError("backend 'tile' runs unplaced graph functions; placed "
                               "functions run on their mesh", hint="use backend='interp'")
    program = tile_program(compiled)
    arrays = run_program(program, [t.array for t in inputs],
                         mode="fast" if mode == "fast" else "checked")
    return rebuild_outputs(compiled, arrays)


class CompiledProgram:
    """A graph function lowered for one signature: its stages, kernels and runs."""

    def __init__(self, fn: JitFunction, compiled: Compiled, backend: str) -> None:
        self.fn = fn
        self.compiled = compiled
        self.backend = check_backend(backend)

    @property
    def tile(self) -> TileProgram:
        """The kernels and host program (generated on first use)."""
        return tile_program(self.compiled)

    @property
    def kernels(self) -> list[GeneratedKernel]:
        """The generated kernels in launch order."""
        program = self.tile
        return [GeneratedKernel(program.module.functions[s.kernel], s.grid)
                for s in program.launches]

    def ir(self, stage: str = "graph") -> str:
        """The text of ``stage``: "graph", "schedule" or "tile"."""
        if stage == "graph":
            return str(self.compiled.module)
        if stage == "schedule":
            from tessera.ir.transforms.schedule import schedule_module

            return str(schedule_module(self.compiled.module))
        if stage == "tile":
            return str(self.tile)
        raise StageError(f"unknown stage {stage!r} of a lowered function",
                         hint="stages: graph, schedule, tile")

    def run(self, *args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        """Run on ``args`` (of the signature it was lowered for) with ``backend``."""
        from tessera.frontend.graph.jit import run_compiled

        backend = check_backend(backend or self.backend)
        compiled = self.fn.compile(*args, **kwargs)
        if compiled is not self.compiled:
            raise ArgumentError(f"{self.fn.name} was lowered for other argument shapes or "
                                "types", hint="lower it again for these arguments")
        leaves, _ = flatten(list(self.fn._arguments.values()))
        inputs = [x for x in leaves if isinstance(x, Tensor)]
        if backend == "tile":
            return run_tile(compiled, inputs, self.fn.mode)
        return run_compiled(compiled, inputs, self.fn.mode)

    def __repr__(self) -> str:
        return f"<tessera lowered {self.fn.name}: {len(self.tile.launches)} kernel(s)>"


__all__ = ["BACKENDS", "CompiledProgram", "GeneratedKernel", "check_backend", "run_tile",
           "tile_program"]
