"""A kernel launch's tile shape and grid of tile groups.

Default grid (``grid`` not given; ``group_size`` defaults to 1)
    * a body using ``tile_m``/``tile_n``/``tile_k`` (or ``block_m``/``block_n``), itself
      or in a function it calls (inlined): one
      group per ``(BM, BN)`` tile of the output — the result annotation, else the last
      tensor parameter the body writes, else the dims ``M``/``N`` — and per ``BK`` slice
      of ``K`` when ``tile_k`` is used: ``(ceil(M/BM), ceil(N/BN)[, ceil(K/BK)])``, only
      as many axes as the highest origin used;
    * a body using ``linear_id()``/``group_id()``: one tile per element of the first
      dimension of the first tensor parameter (after its batch dim): ``ceil(n / G)``
      groups of ``G = group_size`` tiles (saxpy: one tile per element);
    * otherwise one group (per batch index).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from tessera.errors import ArgumentError
from tessera.frontend.kernel.compiler.scope import DEFAULT_TILE, ORIGINS, Param, ResultSpec

if TYPE_CHECKING:
    from tessera.frontend.kernel.specialise import KernelInfo


def tile_of(tile_shape: Any, config: dict[str, Any]) -> tuple[int, int, int]:
    """``(BM, BN, BK)``: the defaults, then an autotune configuration's ``BLOCK_M``/``BM``
    (and N, K) values, then the call's ``tile_shape`` (1 to 3 ints, leading axes)."""
    out = list(DEFAULT_TILE)
    for k, names in enumerate((("BLOCK_M", "BM"), ("BLOCK_N", "BN"), ("BLOCK_K", "BK"))):
        for n in names:
            if n in config:
                if not _is_int(config[n]) or config[n] < 1:
                    raise ArgumentError(f"configuration value {n}={config[n]!r} should be "
                                        "an int >= 1", hint="tile extents are whole numbers")
                out[k] = int(config[n])
    if tile_shape is not None:
        ts = (tile_shape,) if _is_int(tile_shape) else tuple(tile_shape) \
            if isinstance(tile_shape, (tuple, list)) else ()
        if not 1 <= len(ts) <= 3 or any(not _is_int(d) or d < 1 for d in ts):
            raise ArgumentError(f"tile_shape {tile_shape!r} should be 1 to 3 ints >= 1",
                                hint="tile_shape=(BM, BN, BK)")
        out[:len(ts)] = [int(d) for d in ts]
    return out[0], out[1], out[2]


def _is_int(x: Any) -> bool:
    """An int or NumPy integer, not a bool (``grid=True`` is a mistake, not 1)."""
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def grid_of(info: KernelInfo, grid: Any, group_size: int, tile: tuple[int, int, int],
            params: list[Param], dims: dict[str, int], result: ResultSpec | None
            ) -> tuple[int, ...]:
    """The launch's grid of tile groups: ``grid`` checked, or the default grid (see the
    module docstring)."""
    if not _is_int(group_size) or group_size < 1:
        raise ArgumentError(f"group_size must be an int >= 1, got {group_size!r}",
                            hint="group_size counts the tiles of a group, like CUDA's "
                                 "threads per block")
    if grid is not None:
        g = (grid,) if _is_int(grid) else tuple(grid) if isinstance(grid, (tuple, list)) \
            else None
        if g is None or not 1 <= len(g) <= 3 or any(not _is_int(d) or d < 1 for d in g):
            raise ArgumentError(f"grid {grid!r} should be an int >= 1 or a tuple of 1 to 3 "
                                "of them", hint="grid counts tile groups, like CUDA's grid "
                                                "of blocks: grid=4 or grid=(M // BM, N // BN)")
        return tuple(int(d) for d in g)
    axes = [ORIGINS[n] for n in info.used if n in ORIGINS]
    if axes:
        rank = max(axes) + 1
        out_shape: tuple[int, ...] | None = None
        if result is not None:
            out_shape = result.shape[1:] if result.batched else result.shape
        else:
            tensors = {p.name: p for p in params if p.kind == "tensor"}
            for name in reversed(info.written):
                if name in tensors:
                    out_shape = tensors[name].type.shape  # type: ignore[union-attr]
                    break
        sizes = list(out_shape[:2]) if out_shape else []
        for k, sym in enumerate(("M", "N")):
            if len(sizes) <= k:
                sizes.append(dims.get(sym, 1))
        if rank == 3:
            if "K" not in dims:
                raise ArgumentError(f"kernel '{info.name}' uses tile_k but no dim 'K' is "
                                    "bound", hint="pass grid=(...) explicitly")
            sizes.append(dims["K"])
        return tuple(max(1, math.ceil(sizes[a] / tile[a])) for a in range(rank))
    if {"linear_id", "group_id"} & info.used:
        for p in params:
            if p.kind == "tensor" and p.type.shape:  # type: ignore[union-attr]
                n = p.type.shape[0]  # type: ignore[union-attr]
                return (max(1, math.ceil(n / group_size)),)
        raise ArgumentError(f"kernel '{info.name}' has no tensor to size its grid by",
                            hint="pass grid=...")
    return (1,)


__all__ = ["grid_of", "tile_of"]
