"""Tile IR program-id ops: which tile of the launch is running (all scalars but lanes).

``linear_id = group_id * group_size + local_id`` counts the tiles of one batch index;
``grid_coord(axis)`` is the group's coordinate along a grid axis (``tile_m`` is
``grid_coord(0) * BM``); ``lane_id`` is the tile's lanes as a 1-D tile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from tessera.errors import IRVerifyError
from tessera.ir.core import Op, Type, check_count, register_op
from tessera.ir.dialects.tile import INDEX, SCALAR_INDEX
from tessera.ir.types import TensorType


@dataclass(frozen=True)
class _Id(Op):
    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return (SCALAR_INDEX,)


@register_op
@dataclass(frozen=True)
class LinearId(_Id):
    """``group_id * group_size + local_id``: the tile's id within its batch index."""

    name: ClassVar[str] = "tile.linear_id"


@register_op
@dataclass(frozen=True)
class GroupId(_Id):
    """The group's linear id in the grid (C order over the grid's axes)."""

    name: ClassVar[str] = "tile.group_id"


@register_op
@dataclass(frozen=True)
class LocalId(_Id):
    """The tile's index inside its group, ``0 <= local_id < group_size``."""

    name: ClassVar[str] = "tile.local_id"


@register_op
@dataclass(frozen=True)
class GridCoord(_Id):
    """The group's coordinate along grid axis ``axis`` (``tile_m = coord(0) * BM``)."""

    name: ClassVar[str] = "tile.grid_coord"
    axis: int = 0


@register_op
@dataclass(frozen=True)
class LaneId(Op):
    """The lanes of a tile, ``[0, 1, ..., lanes-1]``: element ``k`` of every tile op is
    handled by lane ``k % lanes`` (the mapping sanitizer reports use)."""

    name: ClassVar[str] = "tile.lane_id"
    lanes: int = 32

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        return (TensorType((self.lanes,), INDEX),)


@register_op
@dataclass(frozen=True)
class Arange(Op):
    """The index tile ``[0, 1, ..., n-1]`` (int): compared with a tensor's dims it
    builds the mask of an edge tile (``tile.masked_load``)."""

    name: ClassVar[str] = "tile.arange"
    n: int

    def infer(self, operands: Sequence[Type]) -> tuple[Type, ...]:
        check_count(self, operands, 0)
        if self.n < 0:
            raise IRVerifyError(f"tile.arange({self.n}): the length must be >= 0")
        return (TensorType((self.n,), INDEX),)


__all__ = ["Arange", "GridCoord", "GroupId", "LaneId", "LinearId", "LocalId"]
