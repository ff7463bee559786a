"""A graph function's generated kernels taken to Target IR and PTX: the ``"target"`` and
``"cuda"`` backends of ``ts.jit`` and ``CompiledProgram.ir("target")`` / ``.ptx()``.

Each ``tile.kernel`` of the tile program (:mod:`tessera.ir.transforms.to_tile`) is
lowered for one PTX target by :mod:`tessera.lower`, exactly as a hand-written
``@ts.kernel`` is (``compile_kernel``), checked and rendered to PTX; the host program is
unchanged. ``"target"`` runs the lowered kernels through the host program in the Target
IR interpreter (:mod:`tessera.interp.target.program`) on the CPU, which gives the tile
simulator's bits and so the graph interpreter's; ``"cuda"`` assembles them for the
GPU's architecture and launches them through the CUDA driver.

A kernel the lowering cannot take is a :class:`TargetGenerationError` naming the graph
op behind the Tile IR op that failed and the user's line that made it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tessera.errors import TesseraError
from tessera.ir.core import Function, Instr, Module, walk
from tessera.ir.passes import collector_paused
from tessera.ir.transforms.to_tile import TileGenerationError, TileProgram
from tessera.ir.transforms.to_tile.exact_tiles import exact_tiled

if TYPE_CHECKING:
    from tessera.frontend.kernel.backends.compile import CompiledKernel


class TargetGenerationError(TileGenerationError):
    """A generated kernel that the Tile → Target lowering cannot take yet; the function
    still runs with ``backend="tile"`` or ``"interp"``."""


@dataclass(frozen=True)
class TargetKernel:
    """One generated kernel lowered for one target: its ``ptx.kernel``, PTX and the grid
    of its launch in the host program (the lowered kernel's own ``grid`` attribute is
    in CTAs)."""

    compiled: CompiledKernel
    grid: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.compiled.name

    @property
    def kernel(self) -> Function:
        """The ``ptx.kernel`` function."""
        return self.compiled.kernel

    @property
    def text(self) -> str:
        """The kernel's Target IR text."""
        return str(Module(self.name, {self.name: self.kernel}))

    @property
    def ptx(self) -> str:
        return self.compiled.ptx

    def assemble(self) -> Any:
        """Assemble with ptxas (statistics; a C75xx advisory fails)."""
        return self.compiled.assemble()


class PtxModules(dict[str, str]):
    """The PTX of a program's kernels by kernel name, in launch order; ``str()`` is
    every module, each after a ``// kernel NAME`` comment line."""

    def __str__(self) -> str:
        return "\n".join(f"// kernel {name}\n{text}" for name, text in self.items())


@dataclass
class TargetProgram:
    """A tile program with every kernel lowered for ``target``."""

    target: str
    tile: TileProgram
    kernels: list[TargetKernel]
    #: seconds spent lowering, checking and rendering all kernels, by stage
    seconds: dict[str, float] = field(default_factory=dict)
    #: seconds spent generating the tile program again with the exact matmuls' smaller
    #: tiles first (:func:`~tessera.ir.transforms.to_tile.exact_tiles.exact_tiled`)
    retile_seconds: float = 0.0

    def text(self) -> str:
        """The kernels' Target IR and the host program."""
        module = Module(self.tile.name, {k.name: k.kernel for k in self.kernels})
        return f"{module}\n{self.tile.host_text()}"

    def ptx(self) -> PtxModules:
        """The PTX of each kernel by name."""
        return PtxModules((k.name, k.ptx) for k in self.kernels)

    def run(self, args: list[Any]) -> list[np.ndarray]:
        """Run the host program with the Target IR interpreter (on the CPU)."""
        from tessera.interp.target.program import run_lowered_program

        return run_lowered_program(self.tile, {k.name: k.kernel for k in self.kernels}, args)

    def run_cuda(self, args: list[Any]) -> list[np.ndarray]:
        """Assemble the kernels and run the host program on GPU 0: each launch stages
        the buffers it binds on the device and copies them back."""
        from tessera.backend.ptx.driver.launch import CudaModule, DeviceArrays, device_arch
        from tessera.interp.target.program import kernel_arguments

        buffers = self.tile.bind(args, copy=True)
        by_name = {k.name: k for k in self.kernels}
        cubins = {k.name: k.compiled.assemble(arch=device_arch(self.target)).cubin
                  for k in self.kernels}
        for step in self.tile.launches:
            k = by_name[step.kernel].compiled
            targs = kernel_arguments(k.kernel, [buffers[a] for a in step.args])
            with CudaModule(cubins[k.name]) as module:
                fn = module.function(k.name, k.signature)
                staged = [a for a in targs if isinstance(a, np.ndarray)]
                with DeviceArrays(module.driver, staged) as dev:
                    module.launch(fn, k.grid, k.block, k.shared_bytes, dev.values(targs))
        return [buffers[name] for name in self.tile.results]


def _graph_op_at(graph: Function, instr: Instr | None, loc: Any) -> str:
    """The graph op the user's line ``loc`` made (the Tile IR op's own name when no
    graph op has that line)."""
    here = [g.op.name for g in walk(graph.body) if loc is not None and g.loc == loc
            and not g.op.terminator]
    # several graph ops on one line: the one the tile op is named after (tile.log: graph.log)
    suffix = instr.op.name.partition(".")[2] if instr is not None else ""
    same = [name for name in here if name.partition(".")[2] == suffix]
    if same or here:
        return (same or here)[0]
    return instr.op.name if instr is not None else "the kernel"


def _failing_instr(err: BaseException) -> Instr | None:
    """The Tile IR instruction the lowering was at when ``err`` escaped (the innermost
    ``Lowerer.lower_block`` frame's)."""
    found, tb = None, err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == "lower_block" and isinstance(frame.f_locals.get("instr"),
                                                                Instr):
            found = frame.f_locals["instr"]
        tb = tb.tb_next
    return found


#: storage formats whose tiles the lowering loads and stores bit for bit
LOWERED_STORAGE = ("float32", "bfloat16", "float16", "int32", "bool", "int8",
                   "float8_e4m3fn", "float8_e5m2")


def _check_elements(tile: Function, target: str, graph: Function) -> None:
    """Refuse the tiles the lowering keeps no bits of: tiles of formats other than
    :data:`LOWERED_STORAGE` read from or written to memory (f64 and int64 tensors, fp6
    and fp4), and integers widened to int64 (the arithmetic that saturates integer ops
    as the graph does) unless every int64 value provably stays in the 32-bit registers
    int64 lives in there (:mod:`tessera.lower.int64`). Bool, int8 and fp8 tiles move
    through byte loads and stores (``ld.u8``, ``ld.s8``, ``st.u8``)."""
    from tessera.ir.dialects.tile import memory as tile_memory
    from tessera.ir.dialects.tile.compute import Cast, Mma
    from tessera.ir.types import TensorType
    from tessera.lower.int64 import int64_fits_s32
    from tessera.numerics import storage_of

    # an mma operand is read from shared memory by the mma itself, never into registers
    mma_operands = {v for i in walk(tile.body) if isinstance(i.op, Mma) for v in i.operands[:2]}
    unproved = int64_fits_s32(tile)
    for instr in walk(tile.body):
        moved = [v for v in instr.results if isinstance(instr.op, tile_memory.Load)
                 and v not in mma_operands]
        moved += instr.operands[1:] if isinstance(instr.op, tile_memory.Store) else []
        for v in (*instr.results, *moved):
            t = v.type
            if not isinstance(t, TensorType) or t.rank == 0:
                continue
            name = storage_of(t.element).np_dtype.name
            # int64 index tiles (aranges, masks) are 32-bit arithmetic by design; a cast
            # to int64 is the widening of the user's integers, lowered in s32 where no
            # int64 value of the kernel can leave the s32 range
            widened = name == "int64" and isinstance(instr.op, Cast) and unproved is not None
            if widened:
                raise TargetGenerationError(
                    f"{_graph_op_at(graph, instr, instr.loc)} cannot be lowered for {target} "
                    f"yet (kernel {tile.name}): it computes int64 tiles (saturating integer "
                    "arithmetic) that may leave the 32-bit registers int64 values live in "
                    "(int32 operands, or long chains of int8 ones); int8 sums and products "
                    "are lowered", loc=instr.loc,
                    hint="run the function with backend='tile' (the tile simulator) or "
                         "'interp'")
            if v in moved and name not in LOWERED_STORAGE:
                raise TargetGenerationError(
                    f"{_graph_op_at(graph, instr, instr.loc)} cannot be lowered for {target} "
                    f"yet (kernel {tile.name}): it moves {t.element} tiles, and the PTX "
                    "lowering of generated kernels loads and stores f32, bf16, f16, int32, "
                    "int8, fp8 and bool tiles only",
                    loc=instr.loc,
                    hint="run the function with backend='tile' (the tile simulator) or "
                         "'interp'")


def lower_generated(tile: Function, grid: tuple[int, ...], target: str,
                    graph: Function) -> TargetKernel:
    """Lower, check and render one generated kernel; a failure is a
    :class:`TargetGenerationError` at the user's line of the graph op behind it."""
    from tessera.frontend.kernel.backends.compile import CompiledKernel, lower_and_render
    from tessera.lower.hoist import hoist_broadcasts

    # a hand-written kernel (a graph.kernel_call) is lowered as compile_kernel lowers it
    generated = "tiles" in tile.attrs or set(tile.attrs) <= {"grid", "group_size"}
    if generated:
        _check_elements(tile, target, graph)
    try:
        kernel, ptx, line_map, seconds = lower_and_render(
            hoist_broadcasts(tile) if generated else tile, target)
    except Exception as err:
        # the Tile IR op being lowered carries the user's line of its graph op (a
        # building block's error may have found another frame of the user's file)
        instr = _failing_instr(err)
        loc = instr.loc if instr is not None else err.loc if isinstance(err, TesseraError) \
            else tile.loc
        why = err.message if isinstance(err, TesseraError) else \
            f"the lowering failed ({type(err).__name__}: {err})"
        raise TargetGenerationError(
            f"{_graph_op_at(graph, instr, loc)} cannot be lowered for {target} yet (kernel "
            f"{tile.name}): {why}", loc=loc,
            hint="run the function with backend='tile' (the tile simulator) or 'interp'"
        ) from err
    compiled = CompiledKernel(tile.name, target, tile, kernel, ptx, line_map,
                              {"target": target, "grid": list(grid)}, seconds)
    return TargetKernel(compiled, grid)


def target_program(tile: TileProgram, graph: Function, target: str) -> TargetProgram:
    """``tile`` lowered for ``target`` (made once per target and kept with ``tile``)."""
    from tessera.errors import ArgumentError
    from tessera.ir.dialects.target import TARGETS

    if target not in TARGETS:
        raise ArgumentError(f"unknown PTX target {target!r}",
                            hint=f"use one of {', '.join(TARGETS)}")
    hit = tile.targets.get(target)
    if hit is None:
        with collector_paused():
            hit = tile.targets[target] = _lower_program(tile, graph, target)
    program: TargetProgram = hit
    return program


def _lower_program(source: TileProgram, graph: Function, target: str) -> TargetProgram:
    t0 = time.perf_counter()
    tile = exact_tiled(source, graph, target)
    retile = time.perf_counter() - t0
    seconds: dict[str, float] = {}
    kernels: list[TargetKernel] = []
    for launch in tile.launches:
        if any(k.name == launch.kernel for k in kernels):
            continue
        k = lower_generated(tile.module.functions[launch.kernel], launch.grid, target, graph)
        for stage, s in k.compiled.seconds.items():
            seconds[stage] = seconds.get(stage, 0.0) + s
        kernels.append(k)
    return TargetProgram(target, tile, kernels, seconds, retile)


def device_target() -> str:
    """The PTX target of GPU 0, or :class:`GpuUnavailable` saying why there is none."""
    from tessera.backend.ptx.driver import GpuUnavailable, cuda_available
    from tessera.frontend.kernel.backends.launch import device_target as arch

    ok, why = cuda_available()
    if not ok:
        raise GpuUnavailable(f"no CUDA GPU: {why}",
                             hint="use backend='target' to run the lowered kernels on the CPU")
    return arch()


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and the seconds it took."""
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0


__all__ = ["PtxModules", "TargetGenerationError", "TargetKernel", "TargetProgram",
           "device_target", "lower_generated", "target_program", "timed"]
