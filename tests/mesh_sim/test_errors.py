"""Collectives given the wrong tensor, axis or arguments raise TesseraErrors at the
caller's line, with a hint."""

from __future__ import annotations

import numpy as np

import tessera as ts
from tessera import dist
from tessera.dist import MeshError, MeshShapeError, PlacementError, reduce_in_order

from .util import raises_here

M = dist.mesh(axes=("dp", "tp"), shape=(2, 3))
OTHER = dist.mesh(axes=("dp", "tp"), shape=(3, 2))
A = np.arange(20, dtype=np.float32).reshape(4, 5)
SHARDED = dist.from_numpy(A, mesh=M, layout=dist.ShardSpec(("col",), ("tp",)))
PARTIAL = dist.from_shards([A] * 6, mesh=M, partial=("dp", "tp"))


def test_collectives_over_unknown_axes() -> None:
    raises_here(MeshError, lambda: dist.all_reduce(PARTIAL, "pp"), "'pp'", "dp")
    raises_here(MeshError, lambda: dist.all_gather(SHARDED, "ep"), "'ep'")
    raises_here(MeshError, lambda: dist.reduce_scatter(PARTIAL, ("dp", "dp")), "twice")
    raises_here(MeshError, lambda: dist.broadcast(PARTIAL, "sp"), "'sp'")
    raises_here(MeshError, lambda: dist.ppermute(PARTIAL, ("dp", "tp"), []), "one axis")


def test_wrong_placements_say_what_to_do() -> None:
    text = raises_here(PlacementError, lambda: dist.reduce_scatter(SHARDED, "tp"),
                       "reduce_scatter", "needs a partial tensor", "all_gather")
    assert "sharded" in text
    raises_here(PlacementError, lambda: dist.reduce_scatter(SHARDED, "dp"), "replicated",
                "relayout")
    raises_here(PlacementError, lambda: dist.all_reduce(SHARDED, "dp"), "nothing to reduce")
    raises_here(PlacementError, lambda: dist.all_gather(PARTIAL, "dp"), "all_reduce")
    raises_here(PlacementError, lambda: dist.broadcast(SHARDED, "tp"), "all_gather")
    raises_here(PlacementError, lambda: dist.all_to_all(SHARDED, "tp", 1, 1), "split_dim")
    raises_here(PlacementError, lambda: dist.all_to_all(SHARDED, "tp", 1, 0), "concat_dim")
    raises_here(PlacementError, lambda: dist.ppermute(SHARDED, "dp", [(0, 1)]), "partial=")
    raises_here(PlacementError, lambda: dist.relayout(PARTIAL, dist.ShardSpec()), "reduce")
    two = dist.from_numpy(A, mesh=M, layout=dist.ShardSpec(("col",), (("dp", "tp"),)))
    raises_here(PlacementError, lambda: dist.all_gather(two, "dp"), "minor")


def test_operands_and_arguments() -> None:
    raises_here(MeshError, lambda: dist.all_reduce([PARTIAL, dist.from_shards(
        [A] * 6, mesh=OTHER, partial="dp")], "dp"), "different meshes")
    raises_here(MeshError, lambda: dist.all_gather(A, "tp"), "DistTensor")
    raises_here(ts.DTypeError, lambda: dist.all_reduce(PARTIAL, "dp", op="prod"), "prod")
    raises_here(MeshError, lambda: dist.broadcast(PARTIAL, "dp", root=2), "root")
    raises_here(MeshError, lambda: dist.ppermute(PARTIAL, "tp", [(0, 1), (2, 1)]), "twice")
    raises_here(MeshError, lambda: dist.ppermute(PARTIAL, "tp", [(0, 3)]), "dst")
    raises_here(MeshError, lambda: dist.send(PARTIAL, "tp", src=0, dst=5), "dst")
    raises_here(MeshShapeError, lambda: dist.shift(SHARDED.__class__(  # 5 cols over tp=3
        (4, 5), ts.f32, M, ((), ("tp",)), partial=("dp",)), "tp"), "uneven")


def test_mismatched_shapes_and_uneven_nesting() -> None:
    raises_here(MeshShapeError, lambda: reduce_in_order([A, A[:2]], ts.f32), "shape")
    # 10 columns over dp x tp = 6 are [2, 2, 2, 2, 1, 1]: gathering tp leaves [6, 4], which
    # no array_split over dp = 2 gives ([5, 5]); views of one array must not hide that.
    spec = dist.ShardSpec(("col",), (("dp", "tp"),))
    held = dist.from_numpy(np.zeros((6, 10), np.float32), mesh=M, layout=spec)
    raises_here(MeshShapeError, lambda: dist.all_gather(held, "tp"), "regrouped")
    apart = dist.from_shards(list(held.shards), mesh=M, layout=spec)
    raises_here(MeshShapeError, lambda: dist.all_gather(apart, "tp"), "regrouped")
    seven = dist.from_numpy(np.zeros((6, 7), np.float32), mesh=M, layout=spec)
    assert dist.all_gather(seven, "tp").local_shape(0) == (6, 4)  # [2,1,1 | 1,1,1] nests
    raises_here(ts.DTypeError, lambda: dist.all_reduce(dist.from_shards(
        [np.ones(2, np.int32)] * 6, mesh=M, partial="tp"), "tp", op="mean"), "mean")
