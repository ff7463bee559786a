"""Errors of the mesh simulator: every one is a :class:`tessera.TesseraError`."""

from __future__ import annotations

from tessera.errors import ShapeError, TesseraError


class MeshError(TesseraError):
    """A mesh that cannot exist, or an axis or device that is not in the mesh."""

    kind = "mesh error"


class ShardingError(MeshError):
    """A ShardSpec that does not fit the tensor or the mesh it is applied to."""

    kind = "sharding error"


class PlacementError(MeshError):
    """A collective or constructor applied to a tensor in the wrong placement state
    (for example a reduce_scatter of a tensor that is not partial)."""

    kind = "placement error"


class MaterializeError(MeshError):
    """Making a tensor's values (its global value, or a block of a lazy tensor) would
    allocate more than ``DistTensor.max_materialize_bytes``."""

    kind = "materialization error"


class MeshShapeError(MeshError, ShapeError):
    """Shapes of distributed operands or shards that do not agree.

    Also a :class:`tessera.ShapeError`, so code that catches shape problems in general
    catches these too.
    """

    kind = "shape mismatch"


__all__ = ["MaterializeError", "MeshError", "MeshShapeError", "PlacementError",
           "ShardingError"]
