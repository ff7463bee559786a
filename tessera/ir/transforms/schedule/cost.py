"""The scheduler's cost model: bytes moved through global memory, and the smallest
working set a kernel needs per program.

* ``traffic``: a kernel reads each of its inputs once and writes each of its outputs
  once, so a schedule moves the sum over its kernels of those bytes. Fusing a
  producer into its consumer removes one write and one read of every value that
  stays inside the kernel; that saving is what fusion buys.
* ``working_set``: one program holds a tile of every value of its region. With the
  smallest useful tiles (a strip of ``MIN_GRID_TILE`` elements along the innermost
  grid loop, one index of every other grid loop, ``MIN_SEQ_TILE`` elements along each
  sequential loop) that must fit the target's shared memory per block; a fusion that
  would not fit is not made.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tessera.ir.core import Block, Value
from tessera.ir.dialects.schedule.space import IterationSpace
from tessera.ir.types import TensorType
from tessera.numerics import storage_of

#: the smallest tile a grid loop is cut into (one mma.sync / wgmma row block is 16)
MIN_GRID_TILE = 16
#: the smallest chunk a sequential loop is visited in
MIN_SEQ_TILE = 64
#: the default tile of a matmul's rows and columns: a loop this long is one tile
ONE_TILE = 128


def element_bytes(t: TensorType) -> float:
    """Bytes per element of a tensor type (fractional for sub-byte formats)."""
    return storage_of(t.element).bits / 8


def value_bytes(v: Value) -> int:
    """Bytes of a value in global memory (0 for non-tensors and symbolic shapes)."""
    t = v.type
    if not isinstance(t, TensorType) or not all(isinstance(d, int) for d in t.shape):
        return 0
    return math.ceil(math.prod(t.shape) * element_bytes(t))


def traffic(inputs: Iterable[Value], outputs: Iterable[Value]) -> int:
    """Global bytes moved by a kernel that reads ``inputs`` and writes ``outputs``."""
    return sum(value_bytes(v) for v in set(inputs)) + sum(value_bytes(v) for v in set(outputs))


def tile_bytes(v: Value, space: IterationSpace, tile: Sequence[int]) -> float:
    """Bytes of the tile of ``v`` one program holds when loop ``k`` is cut into ``tile[k]``."""
    t = v.type
    if not isinstance(t, TensorType):
        return 0.0
    n = 1
    for k in range(t.rank):
        loop = space.loop_of.get((v, k))
        n *= tile[loop] if loop is not None else 1
    return n * element_bytes(t)


def minimal_tile(space: IterationSpace) -> list[int]:
    """The smallest useful tile of each loop (see the module docstring)."""
    grid = [k for k, kind in enumerate(space.kinds) if kind == "grid"]
    return [min(e, MIN_SEQ_TILE) if kind != "grid" else
            min(e, MIN_GRID_TILE) if k == grid[-1] else 1
            for k, (e, kind) in enumerate(zip(space.extents, space.kinds))]


def working_set(block: Block, space: IterationSpace) -> float:
    """Bytes of one program's tiles of every value in ``block`` with the smallest tiles."""
    tile = minimal_tile(space)
    values: list[Value] = list(block.args)
    for instr in block.instrs:
        values += instr.results
    return sum(tile_bytes(v, space, tile) for v in values)
