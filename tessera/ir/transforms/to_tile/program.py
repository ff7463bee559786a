"""The host side of a scheduled function at the tile level: its global buffers and the
launches that read and write them, in order.

Buffers are the function's arguments, the tensors kernels pass each other (allocated in
global memory, as Schedule IR places them) and the results. A launch names its kernel,
its grid and the buffers bound to the kernel's parameters, operands first, then
results. ``str()`` prints the program::

    host @f(%x: tensor<64x48xf32>, %y: tensor<64x48xf32>) -> (%k0_0) {
      %k0_0 = global tensor<64x48xf32>
      launch @f_k0 grid (4, 1) (%x, %y, %k0_0)
    }
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import ArgumentError
from tessera.ir.core import Function, Module
from tessera.ir.types import TensorType
from tessera.numerics import storage_of


@dataclass(frozen=True)
class Launch:
    """One kernel launch: the kernel's name, its grid and its buffers by name."""

    kernel: str
    grid: tuple[int, ...]
    args: tuple[str, ...]

    def __str__(self) -> str:
        grid = "(" + ", ".join(map(str, self.grid)) + ("," if len(self.grid) == 1 else "") + ")"
        return f"launch @{self.kernel} grid {grid} ({', '.join('%' + a for a in self.args)})"


@dataclass
class TileProgram:
    """A scheduled function at the tile level: the kernels (a module of ``tile.kernel``
    functions) and the host program that launches them."""

    name: str
    module: Module
    #: every global buffer by name: the arguments, then what the kernels write
    buffers: dict[str, TensorType] = field(default_factory=dict)
    inputs: list[str] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    results: list[str] = field(default_factory=list)
    #: the program lowered for each PTX target, made on first use (by the front end)
    targets: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: seconds the scheduling and the generation took, when the front end timed them
    seconds: dict[str, float] = field(default_factory=dict, repr=False, compare=False)

    @property
    def kernels(self) -> list[Function]:
        """The generated ``tile.kernel`` functions, in launch order."""
        return [self.module.functions[launch.kernel] for launch in self.launches]

    def bind(self, args: Sequence[Any], *, copy: bool = False) -> dict[str, np.ndarray]:
        """Every global buffer of a run on ``args``: the arguments (checked against the
        types the program was generated for; copied with ``copy``, for a runner that
        wants writeable arrays) and zeros for what the kernels write."""
        if len(args) != len(self.inputs):
            raise ArgumentError(f"{self.name} takes {len(self.inputs)} arguments, got "
                                f"{len(args)}")
        buffers: dict[str, np.ndarray] = {}
        for name, value in zip(self.inputs, args):
            t = self.buffers[name]
            a = np.asarray(value)
            if a.shape != tuple(t.shape) or a.dtype != storage_of(t.element).np_dtype:
                raise ArgumentError(f"{self.name}: argument {name!r} is {a.dtype}"
                                    f"{list(a.shape)}, the program was generated for {t}")
            buffers[name] = np.array(a, copy=True) if copy else a
        for name, t in self.buffers.items():
            if name not in buffers:
                buffers[name] = np.zeros(tuple(t.shape), storage_of(t.element).np_dtype)
        return buffers

    def host_text(self) -> str:
        """The host program as text (buffers, launches, results)."""
        params = ", ".join(f"%{n}: {self.buffers[n]}" for n in self.inputs)
        outs = ", ".join(f"%{n}" for n in self.results)
        lines = [f"host @{self.name}({params}) -> ({outs}) {{"]
        for n, t in self.buffers.items():
            if n not in self.inputs:
                lines.append(f"  %{n} = global {t}")
        lines += [f"  {launch}" for launch in self.launches]
        lines.append("}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return f"{self.module}\n{self.host_text()}"


__all__ = ["Launch", "TileProgram"]
