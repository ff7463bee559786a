"""DistTensors: lazy metadata, views of one global array, shared replicas, from_shards."""

from __future__ import annotations

import tracemalloc

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.dist import MeshError, MeshShapeError, PlacementError, ShardingError
from tessera.numerics import Policy
from tests.mesh_sim.util import raises_here, ref_region

NVL72 = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"))
GUIDE = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))


def test_a_trillion_element_bf16_tensor_is_metadata_only() -> None:
    tracemalloc.start()
    try:
        w = dist.tensor(shape=(1_000_000, 1_000_000), mesh=GUIDE, dtype="bf16",
                        layout=dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp")))
        shapes = [w.local_shape(i) for i in range(72)]
        offsets = [w.offsets(i) for i in range(72)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # bytes: bookkeeping only, no shard
    assert w.nbytes == 2 * 10**12 and w.materialized_nbytes == 0 and w.is_lazy
    assert shapes[0] == (111112, 500000) and shapes[-1] == (111111, 500000)
    assert offsets[GUIDE.index((8, 1, 0))] == (1_000_000 - 111111, 500000)
    assert w.replicated_over("dp") and not w.replicated_over("tp")
    assert w.placements == ("sharded", "sharded", "replicated")


def test_lazy_shards_are_zeros_made_one_block_at_a_time() -> None:
    t = dist.tensor(shape=(90, 40), mesh=NVL72, dtype=ts.bf16,
                    layout=dist.ShardSpec(("col",), ("tp",)))
    assert t.materialized_nbytes == 0
    s = t.shard("cuda:2")
    assert s.shape == (90, 5) and s.dtype == ml_dtypes.bfloat16 and not s.any()
    assert t.materialized_nbytes == s.nbytes  # one block, shared by its 8 replicas
    assert all(t.shard(i) is s for i in NVL72.group_of(("dp", "pp"), 2))
    assert not s.flags.writeable
    assert np.asarray(t).shape == (90, 40) and not np.asarray(t).any()


def test_data_becomes_one_global_array_and_shards_are_views() -> None:
    a = np.random.default_rng(0).standard_normal((37, 23))
    t = dist.tensor(shape=(37, 23), mesh=NVL72, dtype="bf16 @accum(f32)", data=a,
                    layout=dist.ShardSpec(("row", "col"), ("dp", "tp")))
    assert t.element == Policy(ts.bf16, accum=ts.f32) and t.dtype == ts.bf16
    g = np.asarray(t)
    assert g.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(g, a.astype(ml_dtypes.bfloat16))  # RNE, once
    dim_axes = (("dp",), ("tp",))
    for i, s in enumerate(t.shards):
        assert np.shares_memory(s, g) and not s.flags.writeable
        region = ref_region((37, 23), (4, 9, 2), ("dp", "tp", "pp"), dim_axes, i)
        np.testing.assert_array_equal(s, g[region])
        assert t.slices(i) == region
    # Replicas along pp are one object, not copies.
    for i in range(0, 72, 2):
        assert t.shard(i) is t.shard(i + 1)


def test_from_numpy_holds_data_in_the_storage_format_without_copy() -> None:
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    t = dist.from_numpy(a, mesh=NVL72, layout=dist.ShardSpec(("col",), ("pp",)))
    assert t.dtype == ts.f32 and np.shares_memory(np.asarray(t), a)
    assert a.flags.writeable  # the caller's array is left as it was
    c = dist.from_numpy(a, mesh=NVL72, layout=dist.ShardSpec(("col",), ("pp",)), copy=True)
    assert not np.shares_memory(np.asarray(c), a)
    np.testing.assert_array_equal(np.asarray(t.shard("cuda:1")), a[:, 3:])
    r = dist.from_numpy(a, mesh=NVL72)
    assert all(s is r.shards[0] for s in r.shards)  # fully replicated: one array
    assert r.placements == ("replicated",) * 3
    k = dist.tensor(data=a, mesh=NVL72, dims=("B", "D"),
                    layout=dist.ShardSpec(partition=("D",), mesh_axes=("tp",)))
    assert k.sharded_dim("tp") == 1 and k.layout == dist.ShardSpec((1,), ("tp",))


def test_from_shards_infers_the_global_shape_and_keeps_partials() -> None:
    m = dist.mesh(axes=("x", "y"), shape=(2, 3))
    rng = np.random.default_rng(1)
    cols = np.array_split(np.arange(10), 3)
    blocks = {(x, y): rng.standard_normal((4, len(cols[y]))).astype(np.float32)
              for x in range(2) for y in range(3)}
    shards = [blocks[m.coords(i)] for i in range(6)]
    t = dist.from_shards(shards, mesh=m, layout=dist.ShardSpec(("col",), ("y",)), partial="x")
    assert t.shape == (4, 10) and t.placements == ("partial", "sharded")
    expect = np.concatenate([blocks[0, y] for y in range(3)], 1) + \
        np.concatenate([blocks[1, y] for y in range(3)], 1)  # rank order: x=0 then x=1
    np.testing.assert_array_equal(np.asarray(t), expect)
    assert t.shard(4) is shards[4] or np.shares_memory(t.shard(4), shards[4])
    rep = dist.from_shards({0: np.ones(3), 1: np.ones(3)}, mesh=dist.mesh(axes="x", shape=(2,)))
    assert rep.shape == (3,) and rep.dtype == ts.f64


def test_tensor_errors_name_the_line() -> None:
    spec = dist.ShardSpec(("col",), ("tp",))
    raises_here(MeshShapeError, lambda: dist.tensor(shape=(3, 3), data=np.ones((2, 3)),
                                                    mesh=NVL72), "(2, 3)")
    raises_here(MeshError, lambda: dist.tensor(shape=(3, 3), mesh="nvl72"), "dist.Mesh")
    raises_here(MeshError, lambda: dist.tensor(shape=(3, 3), mesh=NVL72, layout=("col",)),
                "ShardSpec")
    raises_here(ts.DTypeError, lambda: dist.tensor(shape=(3,), mesh=NVL72, dtype="bf17"),
                "bf17")
    raises_here(ShardingError, lambda: dist.tensor(shape=(8,), layout=spec, mesh=NVL72),
                "1 dim")
    t = dist.tensor(shape=(4, 9), layout=spec, mesh=NVL72)
    raises_here(MeshError, lambda: t.shard("cuda:72"), "cuda:72")
    raises_here(MeshError, lambda: t.placement("ep"), "'ep'")
    m = dist.mesh(axes=("x",), shape=(2,))
    raises_here(MeshShapeError, lambda: dist.from_shards([np.ones(2)], mesh=m), "1 shards")
    raises_here(MeshShapeError, lambda: dist.from_shards([np.ones(3), np.ones(1)], mesh=m,
                                                         layout=dist.ShardSpec(0, "x")),
                "array_split")
    raises_here(PlacementError, lambda: dist.from_shards([np.ones(2), np.zeros(2)], mesh=m),
                "different values")
    raises_here(PlacementError, lambda: dist.from_shards([np.ones(2), np.ones(2)], mesh=m,
                                                         layout=dist.ShardSpec(0, "x"),
                                                         partial="x"), "both")
    held = dist.from_numpy(np.ones((2, 2)), mesh=NVL72)
    with pytest.raises(ValueError):
        np.asarray(held)[0, 0] = 1.0  # the global value a tensor holds is read-only
