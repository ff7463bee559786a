"""Bad arguments to the mesh simulator's public callables are TesseraErrors at the call.

Each case is a mistake a user can make (a wrong kind of value, a wrong number of
arguments); each must be a TesseraError subclass whose message names this file and
line and gives a hint, never a TypeError or ValueError from inside.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import dist
from tests.mesh_sim.util import raises_here

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
A = np.ones((2, 3), np.float32)
X = dist.from_numpy(np.ones((8, 4), np.float32), mesh=MESH,
                    layout=dist.ShardSpec(("row",), ("tp",)))


def test_meshes() -> None:
    raises_here(ts.MeshError, lambda: dist.Mesh(None), "mesh axes None")
    raises_here(ts.MeshError, lambda: dist.mesh(devices=5, axes=("a",)), "devices 5")
    raises_here(ts.MeshError, lambda: dist.mesh(axes=("a",), shape=A), "mesh shape")
    raises_here(ts.MeshError, lambda: dist.mesh(axes=("a",), shape=(np.ones(2),)), "size")
    raises_here(ts.ArgumentError, lambda: dist.Mesh(), "Mesh", "axes")
    # a shape is checked before its devices are listed (10**12 of them would not fit)
    raises_here(ts.MeshError, lambda: dist.mesh(axes=("a", "b"), shape=(10**6, 10**6)),
                "devices, more than")


def test_shard_specs_and_slices() -> None:
    for bad in (-1, 1.5, object(), np.float32(1)):
        raises_here(ts.ShardingError, lambda b=bad: dist.ShardSpec(("row",), b), "mesh_axes")
    raises_here(ts.ShardingError, lambda: dist.ShardSpec(object(), ("tp",)), "partition")
    spec = dist.ShardSpec(("row",), ("tp",))
    assert dist.shard_slices((5, 2), spec, MESH)[4] == (slice(0, 2), slice(0, 2))
    raises_here(ts.ShardingError, lambda: dist.shard_slices((5, -2), spec, MESH), "shape")
    raises_here(ts.ShardingError, lambda: dist.shard_slices((5, 2), "row", MESH), "ShardSpec")
    raises_here(ts.ArgumentError, lambda: dist.shard_slices((5, 2)), "missing")
    assert dist.split_offsets(5, 3) == [0, 2, 4, 5]
    for n, parts in (("a", 2), (5, 0), (5, 1.5), (-1, 2), (True, 2), (10**30, 10**30)):
        raises_here(ts.ShardingError, lambda n=n, p=parts: dist.split_offsets(n, p), "split")


def test_regions_and_privileges() -> None:
    raises_here(ts.RegionError, lambda: ts.Region(), "annotation")
    raises_here(ts.RegionError, lambda: ts.reduce(np.array(["a", "b"])), "privilege")
    raises_here(ts.RegionError, lambda: ts.reduce("prod"), "privilege")
    assert repr(ts.reduce("max")) == "reduce('max')"
    raises_here(ts.ArgumentError, lambda: ts.write("sum", "max"), "too many")


def test_launches() -> None:
    raises_here(ts.ArgumentError, lambda: ts.index_launch(), "axis")
    raises_here(ts.ArgumentError, lambda: ts.index_launch("tp", 1), "index_launch")
    raises_here(ts.TesseraError, lambda: dist.axis_index(["tp"]), "axis_index")
    raises_here(ts.ArgumentError, lambda: dist.launch_graph(True, 1), "launch_graph")
    raises_here(ts.ArgumentError, lambda: dist.LaunchGraph(bogus=1), "bogus")


def test_reductions_shift_and_direct_tensors() -> None:
    raises_here(ts.MeshShapeError, lambda: dist.reduce_in_order("abc", "f32"), "arrays")
    raises_here(ts.DTypeError, lambda: dist.reduce_in_order([A], A), "format")
    raises_here(ts.DTypeError, lambda: dist.reduce_in_order([A], "f32", op=A), "reduction")
    got = dist.reduce_in_order([A, np.float32(2.0) * A], "f32")
    assert np.array_equal(got, 3 * A)
    raises_here(ts.MeshError, lambda: dist.shift(X, "tp", 1.5), "offset")
    raises_here(ts.MeshError, lambda: ts.DistTensor((2,), "f32", "mesh", ((),)), "Mesh")
    raises_here(ts.MeshError, lambda: ts.DistTensor(7, "f32", MESH, ((),)), "shape")
    raises_here(ts.MeshError, lambda: ts.DistTensor((2,), "f32", MESH, (("zz",),)), "dim_axes")


CALLABLES = [dist.Mesh, dist.mesh, dist.ShardSpec, dist.shard_slices, dist.split_offsets,
             dist.reduce_in_order, dist.shift, dist.axis_index, ts.index_launch,
             ts.DistTensor, ts.reduce, ts.Region]
BAD = ["abc", None, object(), {"a": 1}, [1, [2, 3]], 1 + 2j, np.array(["a", "b"]), -1,
       10**30, float("nan"), np.float32(1), (), np.ones((), np.float32), A, MESH, X]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.sampled_from(CALLABLES), st.lists(st.sampled_from(BAD), max_size=4))
def test_random_bad_arguments_are_tessera_errors(fn, args) -> None:
    try:
        fn(*args)
    except ts.TesseraError as err:
        assert "test_api_arguments.py" in str(err) and "hint:" in str(err), str(err)
    except Exception as err:  # anything else escaping is the bug this test is about
        pytest.fail(f"{fn.__name__}{tuple(args)!r} raised {type(err).__name__}: {err}")
