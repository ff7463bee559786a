"""ShardSpecs: dim references, numpy.array_split regions with offsets, and errors."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera import dist
from tessera.dist import ShardingError, shard_slices
from tests.mesh_sim.util import raises_here, ref_region

NVL72 = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"))


def test_1024_columns_over_tp9_follow_array_split() -> None:
    spec = dist.ShardSpec(partition=("col",), mesh_axes=("tp",))
    slices = shard_slices((1024, 1024), spec, NVL72)
    pieces = np.array_split(np.arange(1024), 9)
    sizes = [len(p) for p in pieces]
    assert sizes == [114] * 7 + [113] * 2  # 7 = 1024 % 9 shards one larger
    for i, sl in enumerate(slices):
        rank = NVL72.rank_in("tp", i)
        assert sl[0] == slice(0, 1024)
        assert (sl[1].start, sl[1].stop) == (int(pieces[rank][0]), int(pieces[rank][-1]) + 1)
    t = dist.tensor(shape=(1024, 1024), layout=spec, mesh=NVL72, dtype="bf16")
    assert [t.local_shape(f"cuda:{2 * r}")[1] for r in range(9)] == sizes
    assert [t.offsets(f"cuda:{2 * r}") for r in range(9)] == \
        [(0, int(p[0])) for p in pieces]


def test_dim_references_are_equivalent() -> None:
    shape = (10, 7, 5)
    ref = shard_slices(shape, dist.ShardSpec((0, 1), ("dp", "tp")), NVL72)
    for part in [("row", "col"), (0, -2), ("B", "D")]:
        spec = dist.ShardSpec(partition=part, mesh_axes=("dp", "tp"))
        assert shard_slices(shape, spec, NVL72, dims=("B", "D", "H")) == ref
    # With no partition, mesh_axes is positional (JAX's PartitionSpec).
    assert shard_slices(shape, dist.ShardSpec(mesh_axes=("dp", "tp")), NVL72) == ref
    # None on either side of a pair leaves it out.
    spec = dist.ShardSpec(partition=("row", "col", None), mesh_axes=("dp", "tp", "pp"))
    assert shard_slices(shape, spec, NVL72) == ref
    assert dist.ShardSpec(("row",), ("tp",)).axes == ("tp",)


def test_tuple_axes_split_over_the_product_row_major() -> None:
    spec = dist.ShardSpec(partition=("row",), mesh_axes=(("tp", "dp"),))
    slices = shard_slices((100, 3), spec, NVL72)
    pieces = np.array_split(np.arange(100), 36)
    for i, sl in enumerate(slices):
        rank = NVL72.rank_in("tp", i) * 4 + NVL72.rank_in("dp", i)
        assert (sl[0].start, sl[0].stop) == (int(pieces[rank][0]), int(pieces[rank][-1]) + 1)


@st.composite
def layouts(draw: st.DrawFn) -> tuple:
    mesh_shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    axes = tuple(f"a{k}" for k in range(len(mesh_shape)))
    shape = tuple(draw(st.lists(st.integers(0, 9), min_size=1, max_size=3)))
    free = list(axes)
    dim_axes = []
    for _ in shape:
        k = draw(st.integers(0, min(2, len(free))))
        picked = draw(st.permutations(free))[:k]
        free = [a for a in free if a not in picked]
        dim_axes.append(tuple(picked))
    return mesh_shape, axes, shape, tuple(dim_axes)


@settings(max_examples=80, deadline=None)
@given(layouts())
def test_regions_match_the_numpy_reference(case: tuple) -> None:
    mesh_shape, axes, shape, dim_axes = case
    mesh = dist.mesh(axes=axes, shape=mesh_shape)
    pairs = [(d, a if len(a) > 1 else a[0]) for d, a in enumerate(dim_axes) if a]
    spec = dist.ShardSpec(tuple(d for d, _ in pairs), tuple(a for _, a in pairs))
    got = shard_slices(shape, spec, mesh)
    for i in range(mesh.size):
        assert got[i] == ref_region(shape, mesh_shape, axes, dim_axes, i)
    # The regions of one replica group tile the global array exactly once.
    sharded = [a for a in axes if any(a in e for e in dim_axes)]
    count = np.zeros(shape, np.int64)
    for i in range(mesh.size):
        c = np.unravel_index(i, mesh_shape)
        if all(c[axes.index(a)] == 0 for a in axes if a not in sharded):
            count[got[i]] += 1
    assert (count == 1).all()


def test_sharding_errors_name_the_line() -> None:
    two_d = dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp"))
    raises_here(ShardingError, lambda: shard_slices((8,), two_d, NVL72), "has 1 dim")
    raises_here(ShardingError, lambda: dist.ShardSpec(("row", 0), ("tp", "pp")).resolve(2),
                "sharded twice")
    raises_here(ShardingError, lambda: dist.ShardSpec(("row", "col"), ("tp", "tp")),
                "'tp'", "more than one dim")
    raises_here(ShardingError, lambda: dist.ShardSpec(("row", "col"), ("tp", ("dp", "tp"))),
                "'tp'")
    raises_here(ShardingError, lambda: shard_slices((8,), dist.ShardSpec(("row",), ("ep",)),
                                                    NVL72), "'ep'")
    raises_here(ShardingError, lambda: dist.ShardSpec(("row", "col"), ("tp",)), "2 entries")
    raises_here(ShardingError, lambda: dist.ShardSpec(("K",), ("tp",)).resolve(2), "'K'")
    raises_here(ShardingError, lambda: dist.ShardSpec(("row",), (3,)), "axis name")
    raises_here(ShardingError, lambda: dist.ShardSpec((1.5,), ("tp",)), "tensor dim")
    raises_here(ShardingError, lambda: dist.tensor(shape=(4, 4), mesh=NVL72,
                                                   layout=dist.ShardSpec((2,), ("tp",))), "dim")
