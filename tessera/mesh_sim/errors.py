"""Errors of the mesh simulator: every one is a :class:`tessera.TesseraError`.

They are defined in :mod:`tessera.errors`, below the IR, whose placement rules raise
them too; this module keeps the names where the simulator's users expect them.
"""

from __future__ import annotations

from tessera.errors import (
    MaterializeError,
    MeshError,
    MeshShapeError,
    PlacementError,
    ShardingError,
)

__all__ = ["MaterializeError", "MeshError", "MeshShapeError", "PlacementError",
           "ShardingError"]
