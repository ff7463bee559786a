"""Every collective against a NumPy reference, over random meshes, layouts and formats.

A case is a random mesh, a global shape, an element format, a set of partial axes and a
layout over the other axes. Device ``i`` holds ``data[pc][region]``, where ``pc`` is its
coordinates on the partial axes: one random global array per summand. The references
below are plain loops over devices with ``functools.reduce`` in rank order.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera import dist
from tessera.dist import MeshShapeError

from .util import ref_coords, ref_region

STORAGE = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
           "bf16 @accum(f32)": ml_dtypes.bfloat16}
ACCUM = {"f32": np.float32, "bf16": np.float32, "f64": np.float64,
         "bf16 @accum(f32)": np.float32}
UFUNC = {"sum": np.add, "mean": np.add, "max": np.maximum, "min": np.minimum}


@dataclass
class Case:
    """One random distributed tensor and the data it was built from."""

    mesh: dist.Mesh
    shape: tuple[int, ...]
    dtype: str
    partial: tuple[str, ...]
    dim_axes: tuple[tuple[str, ...], ...]
    data: dict[tuple[int, ...], np.ndarray]  # partial coordinates -> global summand

    def pc(self, i: int, replace: dict[str, int] | None = None) -> tuple[int, ...]:
        c = dict(zip(self.mesh.axes, ref_coords(i, self.mesh.shape)))
        c.update(replace or {})
        return tuple(c[a] for a in self.partial)

    def region(self, i: int, dim_axes: Any = None) -> tuple[slice, ...]:
        return ref_region(self.shape, self.mesh.shape, self.mesh.axes,
                          self.dim_axes if dim_axes is None else dim_axes, i)

    def build(self) -> dist.DistTensor:
        shards = [self.data[self.pc(i)][self.region(i)] for i in range(self.mesh.size)]
        pairs = [(d, a) for d, a in enumerate(self.dim_axes) if a]
        spec = dist.ShardSpec(tuple(d for d, _ in pairs), tuple(a for _, a in pairs))
        return dist.from_shards(shards, mesh=self.mesh, layout=spec, dtype=self.dtype,
                                partial=self.partial, shape=self.shape)

    def reduced(self, i: int, axes: tuple[str, ...], op: str = "sum") -> np.ndarray:
        """Device i's view of the global value after reducing over ``axes`` in rank order."""
        sizes = [self.mesh.axis_size(a) for a in axes]
        terms = [self.data[self.pc(i, dict(zip(axes, cs)))].astype(ACCUM[self.dtype])
                 for cs in itertools.product(*(range(s) for s in sizes))]
        total = functools.reduce(UFUNC[op], terms)
        if op == "mean":
            total = total / ACCUM[self.dtype](len(terms))
        return total.astype(STORAGE[self.dtype])


@st.composite
def cases(draw: st.DrawFn, min_partial: int = 0, min_sharded: int = 0) -> Case:
    mesh_shape = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    axes = tuple(f"a{k}" for k in range(len(mesh_shape)))
    mesh = dist.mesh(axes=axes, shape=mesh_shape)
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=3)))
    order = draw(st.permutations(axes))
    n_partial = draw(st.integers(min_partial, len(axes) - min_sharded))
    partial = tuple(a for a in axes if a in order[:n_partial])
    free = list(order[n_partial:])
    dim_axes = []
    for _ in shape:
        k = draw(st.integers(0, min(2, len(free))))
        dim_axes.append(tuple(free[:k]))
        free = free[k:]
    if sum(map(len, dim_axes)) < min_sharded:
        dim_axes[0] = (*dim_axes[0], *free[:min_sharded])
    dtype = draw(st.sampled_from(list(STORAGE)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = {pc: rng.standard_normal(shape).astype(STORAGE[dtype])
            for pc in itertools.product(*(range(mesh.axis_size(a)) for a in partial))}
    return Case(mesh, shape, dtype, partial, tuple(dim_axes), data)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def uneven_nesting(case: Case, *dims: int) -> bool:
    """True when a dim split over two axes has a size the pair does not divide: gathering
    one of them may then have no array_split layout, and MeshShapeError is the answer."""
    return any(len(case.dim_axes[d]) > 1 and case.shape[d] % int(np.prod(
        [case.mesh.axis_size(a) for a in case.dim_axes[d]])) for d in dims)


def check_shared(t: dist.DistTensor) -> None:
    """Devices with equal block keys hold one array object."""
    first: dict[tuple[int, ...], np.ndarray] = {}
    for i in range(t.mesh.size):
        s = first.setdefault(t.block_key(i), t.shard(i))
        assert t.shard(i) is s


@settings(max_examples=100, deadline=None)
@given(cases(min_partial=1), st.data())
def test_all_reduce(case: Case, data: st.DataObject) -> None:
    t = case.build()
    axis = data.draw(st.sampled_from(case.partial))
    op = data.draw(st.sampled_from(["sum", "sum", "mean", "max", "min"]))
    r = dist.all_reduce(t, axis, op=op)
    assert r.placement(axis) == "replicated" and r.partial_axes == tuple(
        a for a in case.partial if a != axis)
    for i in range(case.mesh.size):
        assert same_bits(r.shard(i), case.reduced(i, (axis,), op)[case.region(i)])
    check_shared(r)
    if op == "sum":  # the global value is kept: sum over all partial axes in mesh order
        full = dist.all_reduce(t, case.partial)
        assert same_bits(np.asarray(t), np.asarray(full))


@settings(max_examples=100, deadline=None)
@given(cases(min_partial=1), st.data())
def test_reduce_scatter(case: Case, data: st.DataObject) -> None:
    free = [d for d, a in enumerate(case.dim_axes) if not a]
    if not free:
        return
    t = case.build()
    axis = data.draw(st.sampled_from(case.partial))
    dim = data.draw(st.sampled_from(free))
    r = dist.reduce_scatter(t, axis, dim=dim)
    new_axes = tuple((axis,) if d == dim else a for d, a in enumerate(case.dim_axes))
    assert r.placement(axis) == "sharded" and r.sharded_dim(axis) == dim
    for i in range(case.mesh.size):
        expect = case.reduced(i, (axis,))[case.region(i, new_axes)]
        assert same_bits(r.shard(i), expect)
    check_shared(r)


@settings(max_examples=100, deadline=None)
@given(cases(min_sharded=1), st.data())
def test_all_gather(case: Case, data: st.DataObject) -> None:
    t = case.build()
    d = next(d for d, a in enumerate(case.dim_axes) if a)
    axis = case.dim_axes[d][-1]  # the minor axis of the dim
    if uneven_nesting(case, d):
        try:
            dist.all_gather(t, axis)
        except MeshShapeError:
            return
    g = dist.all_gather(t, axis)
    new_axes = tuple(a[:-1] if k == d else a for k, a in enumerate(case.dim_axes))
    assert g.placement(axis) == "replicated"
    for i in range(case.mesh.size):
        assert same_bits(g.shard(i), case.data[case.pc(i)][case.region(i, new_axes)])
    check_shared(g)
    assert same_bits(np.asarray(g), np.asarray(t))


@settings(max_examples=100, deadline=None)
@given(cases(min_sharded=1), st.data())
def test_all_to_all(case: Case, data: st.DataObject) -> None:
    c = next(d for d, a in enumerate(case.dim_axes) if a)
    others = [d for d in range(len(case.shape)) if d != c]
    if not others:
        return
    t = case.build()
    s = data.draw(st.sampled_from(others))
    axis = case.dim_axes[c][-1]
    new_axes = tuple(a[:-1] if k == c else (*a, axis) if k == s else a
                     for k, a in enumerate(case.dim_axes))
    nested = len(case.dim_axes[s]) > 0 and case.shape[s] % case.mesh.axis_size(new_axes[s])
    if nested or uneven_nesting(case, c):
        try:
            dist.all_to_all(t, axis, split_dim=s, concat_dim=c)
        except MeshShapeError:
            return
    r = dist.all_to_all(t, axis, split_dim=s, concat_dim=c)
    assert r.sharded_dim(axis) == s
    for i in range(case.mesh.size):
        assert same_bits(r.shard(i), case.data[case.pc(i)][case.region(i, new_axes)])
    assert same_bits(np.asarray(r), np.asarray(t))


@settings(max_examples=40, deadline=None)
@given(cases(min_partial=1), st.data())
def test_broadcast(case: Case, data: st.DataObject) -> None:
    t = case.build()
    axis = data.draw(st.sampled_from(case.partial))
    root = data.draw(st.integers(0, case.mesh.axis_size(axis) - 1))
    b = dist.broadcast(t, axis, root=root)
    assert b.placement(axis) == "replicated"
    for i in range(case.mesh.size):
        expect = case.data[case.pc(i, {axis: root})][case.region(i)]
        assert same_bits(b.shard(i), expect)
    check_shared(b)


@settings(max_examples=40, deadline=None)
@given(cases(min_partial=1), st.data())
def test_ppermute_send_recv_shift(case: Case, data: st.DataObject) -> None:
    t = case.build()
    axis = data.draw(st.sampled_from(case.partial))
    n = case.mesh.axis_size(axis)
    dst = data.draw(st.permutations(range(n)))
    keep = data.draw(st.integers(0, n))
    perm = [(s, d) for s, d in zip(range(n), dst)][:keep]
    p = dist.ppermute(t, axis, perm)
    src_of = {d: s for s, d in perm}
    for i in range(case.mesh.size):
        rank = case.mesh.rank_in(axis, i)
        if rank in src_of:
            expect = case.data[case.pc(i, {axis: src_of[rank]})][case.region(i)]
        else:
            expect = np.zeros(t.local_shape(i), STORAGE[case.dtype])
        assert same_bits(p.shard(i), expect)
    one = dist.send(t, axis, src=0, dst=n - 1)
    assert same_bits(np.asarray(one), np.asarray(dist.recv(t, axis, dst=n - 1, src=0)))
    ring = dist.shift(t, axis, 1)
    for i in range(case.mesh.size):
        rank = case.mesh.rank_in(axis, i)
        src = case.data[case.pc(i, {axis: (rank - 1) % n})][case.region(i)]
        assert same_bits(ring.shard(i), src)


def test_ppermute_of_an_even_sharded_tensor_moves_shards() -> None:
    m = dist.mesh(axes=("x",), shape=(4,))
    a = np.arange(32, dtype=np.float32).reshape(8, 4)
    t = dist.from_numpy(a, mesh=m, layout=dist.ShardSpec(("row",), ("x",)))
    s = dist.shift(t, "x", 1)
    np.testing.assert_array_equal(np.asarray(s), np.roll(a, 2, axis=0))
    assert s.shard(1) is t.shard(0)  # forwarded by reference, not copied


def test_grouped_operands_and_lazy_tensors() -> None:
    m = dist.mesh(axes=("dp", "tp"), shape=(2, 2))
    # Device i sits at dp = i // 2; the shards differ along dp only (tp replicates).
    a = dist.from_shards([np.full(3, i // 2 + 1, np.float32) for i in range(4)], mesh=m,
                         partial="dp")
    b = dist.from_shards([np.full(2, i // 2 + 5, np.float64) for i in range(4)], mesh=m,
                         partial="dp")
    ra, rb = dist.all_reduce([a, b], "dp")
    np.testing.assert_array_equal(ra.shard(0), [3, 3, 3])
    np.testing.assert_array_equal(rb.shard(3), [11, 11])
    lazy = dist.tensor(shape=(10**6, 10**6), mesh=m, dtype="bf16",
                       layout=dist.ShardSpec(("row", "col"), ("dp", "tp")))
    g = dist.all_gather(dist.all_gather(lazy, "tp"), "dp")
    assert g.is_lazy and g.materialized_nbytes == 0 and g.placements == ("replicated",) * 2
    moved = dist.all_to_all(lazy, "tp", split_dim=0, concat_dim=1)
    assert moved.is_lazy and moved.dim_axes == (("dp", "tp"), ())


def test_reduce_scatter_into_a_dim_another_axis_splits() -> None:
    m = dist.mesh(axes=("dp", "tp"), shape=(2, 3))
    rng = np.random.default_rng(5)
    g = [rng.standard_normal((12, 2)).astype(np.float32) for _ in range(3)]  # tp summands
    shards = [g[m.coords(i)[1]][6 * m.coords(i)[0]:6 * m.coords(i)[0] + 6] for i in range(6)]
    t = dist.from_shards(shards, mesh=m, layout=dist.ShardSpec(0, "dp"), partial="tp",
                         dims=("N", "D"))
    r = dist.reduce_scatter(t, "tp", dim="N")
    assert r.dim_axes == (("dp", "tp"), ())
    total = functools.reduce(np.add, g)
    for i in range(6):
        dp, tp = m.coords(i)
        k = dp * 3 + tp
        assert same_bits(r.shard(i), total[2 * k:2 * k + 2])


def test_relayout_keeps_the_value() -> None:
    m = dist.mesh(axes=("dp", "tp"), shape=(2, 3))
    a = np.arange(35, dtype=np.float32).reshape(5, 7)
    rep = dist.from_numpy(a, mesh=m)
    cols = dist.relayout(rep, dist.ShardSpec(("col",), ("tp",)))
    assert np.shares_memory(cols.shard(0), a)  # held data: only the views change
    apart = dist.from_shards(list(cols.shards), mesh=m, layout=dist.ShardSpec(1, "tp"))
    rows = dist.relayout(apart, dist.ShardSpec(("row", "col"), ("tp", "dp")))
    for i in range(6):
        dp, tp = m.coords(i)
        r = np.array_split(np.arange(5), 3)[tp]
        c = np.array_split(np.arange(7), 2)[dp]
        assert same_bits(rows.shard(i), a[r[0]:r[-1] + 1, c[0]:c[-1] + 1])
