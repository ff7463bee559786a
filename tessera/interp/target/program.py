"""Run a tile program's host program with its kernels lowered to Target IR: allocate
the global buffers, launch each lowered kernel in order with the Target IR interpreter
and return the results.

This is :func:`tessera.interp.tile.program.run_program` one level down: the same
buffers and launches, each kernel the ``ptx.kernel`` that :mod:`tessera.lower` made of
its ``tile.kernel``, so a run here is what the program's PTX computes, bit for bit.
Arguments and results are arrays in their elements' storage formats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessera.errors import ArgumentError
from tessera.ir.core import Function
from tessera.ir.dialects.target import RegType, TensorMapType
from tessera.ir.transforms.to_tile import TileProgram


def kernel_arguments(kernel: Function, arrays: Sequence[np.ndarray]) -> list[Any]:
    """The Target IR interpreter's arguments of a lowered kernel launched by a host
    program on ``arrays`` (one buffer per ``tile.kernel`` parameter, then the output of
    a kernel that returns a tile, which its lowered ``out`` parameter takes): each
    pointer parameter's array, each scalar parameter's value, then a tensor map over
    the array a ``tmap`` parameter names."""
    from tessera.interp.target.runner import TensorMapArg

    pointer = RegType("u64")
    # a rank-0 buffer is passed as its one-element view (a 0-d array reads as a scalar)
    out: list[Any] = [a.reshape(1) if p.type == pointer and a.ndim == 0 else a
                      if p.type == pointer else np.asarray(a).reshape(-1)[0]
                      for p, a in zip(kernel.body.args, arrays)]
    for p in kernel.body.args[len(arrays):]:
        t = p.type
        if not isinstance(t, TensorMapType):
            raise ArgumentError(f"kernel {kernel.name} has a parameter {p.hint!r} of type "
                                f"{t} that no buffer of the host program binds")
        whole = arrays[t.arg]
        out.append(TensorMapArg(whole.reshape(-1, whole.shape[-1]) if whole.ndim else
                                whole.reshape(1, 1), t.elem, t.box, t.swizzle))
    return out


def run_lowered_program(program: TileProgram, kernels: Mapping[str, Function],
                        args: Sequence[Any]) -> list[np.ndarray]:
    """Run ``program`` on ``args`` with its kernels lowered (``kernels`` maps each
    ``tile.kernel``'s name to its ``ptx.kernel``) in the Target IR interpreter."""
    from tessera.interp.target.runner import run_target

    buffers = program.bind(args, copy=True)  # the interpreter writes in place
    for step in program.launches:
        kernel = kernels[step.kernel]
        run_target(kernel, kernel_arguments(kernel, [buffers[a] for a in step.args]))
    return [buffers[name] for name in program.results]


__all__ = ["kernel_arguments", "run_lowered_program"]
