"""Run a tile program (:class:`tessera.ir.transforms.to_tile.TileProgram`) in the tile
simulator: allocate its global buffers, launch its kernels in order with the
simulator's sanitizers (checked mode) and return its results.

Arguments and results are arrays in their elements' storage formats, as
:func:`tessera.interp.graph.run_function` takes and returns them, so the two runs
compare bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import numpy as np

from tessera.interp.tile import LaunchGeometry, PreparedKernel, launch, prepare
from tessera.ir.transforms.to_tile import TileProgram

#: prepared kernels by program and mode (a program is immutable once generated)
_PREPARED: dict[tuple[int, str, str], tuple[TileProgram, PreparedKernel]] = {}


def _prepared(program: TileProgram, name: str, mode: str) -> PreparedKernel:
    key = (id(program), name, mode)
    hit = _PREPARED.get(key)
    if hit is None or hit[0] is not program:
        hit = _PREPARED[key] = (program, prepare(program.module.functions[name],
                                                 mode == "fast", mode == "reference"))
    return hit[1]


def run_program(program: TileProgram, args: Sequence[Any], mode: str = "checked",
                schedule: str = "auto",
                watch: Callable[[str], AbstractContextManager[Any]] | None = None
                ) -> list[np.ndarray]:
    """Run ``program`` on ``args`` (one array per input buffer); ``mode`` is the tile
    simulator's ``"checked"`` (sanitizers on, exact numerics), ``"fast"`` or
    ``"reference"`` (checked, every access through the reference rules). ``watch(name)``,
    when given, is a context around each launch (the explain page's tile maps)."""
    buffers = program.bind(args)
    fast = mode == "fast"
    for step in program.launches:
        compiled = _prepared(program, step.kernel, mode)
        # inputs are read-only views: a kernel never writes what it only reads
        arrays = [buffers[a] for a in step.args]
        attrs = program.module.functions[step.kernel].attrs
        # a hand-written kernel (graph.kernel_call) keeps its batch and group size, and
        # one that returns a tile writes it into its last buffer
        output = arrays.pop() if "result_shape" in attrs else None
        geometry = LaunchGeometry(int(attrs.get("batch", 1)), step.grid,
                                  int(attrs.get("group_size", 1)))
        with watch(step.kernel) if watch else nullcontext():
            launch(compiled, arrays, geometry, checked=not fast, schedule=schedule,
                   output=output, output_element=attrs.get("result_element"))
    return [buffers[name].copy() if name in program.inputs else buffers[name]
            for name in program.results]


__all__ = ["run_program"]
