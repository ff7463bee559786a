"""Region privileges in launches: enforcement at the offending line, write-back in place,
reductions combined in index order, and the dependence analysis of launch sequences."""

from __future__ import annotations

import inspect
from typing import Any

import networkx as nx
import numpy as np
import pytest

import tessera as ts
from tessera import Region, dist, read, reduce, write
from tessera.mesh_sim import reduce_in_order
from tests.mesh_sim.util import raises_here

RNG = np.random.default_rng(34)
M = dist.mesh(axes=("dp", "tp"), shape=(2, 3))


def arr(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def cols(a: np.ndarray) -> ts.DistTensor:
    return dist.from_numpy(a, mesh=M, layout=dist.ShardSpec(("col",), ("tp",)))


def same_bits(a: Any, b: Any) -> bool:
    x, y = np.asarray(a), np.asarray(b)
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def line_of(fn: Any, marker: str) -> int:
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, text in enumerate(lines) if marker in text)


def test_the_teaser_step_writes_its_output_region_in_place() -> None:
    x, w = arr(4, 6), arr(6, 9)
    W, Y = cols(w), dist.tensor(shape=(4, 9), mesh=M, dtype="f32",
                                layout=dist.ShardSpec(("col",), ("tp",)))
    held = Y

    def step(X: Any, W: Region[read], Y: Region[write]) -> None:
        Y[...] = ts.gemm(X, W)

    assert ts.index_launch(axis="tp")(step)(x, W, Y) is None
    assert Y is held and Y.dim_axes == ((), ("tp",)) and same_bits(Y, ts.gemm(x, w))


def test_writes_to_part_of_a_region() -> None:
    y = arr(4, 9)
    Y = cols(y)

    def step(Y: Region[write]) -> None:
        Y[1, 0:2] = 5.0
        Y[2:4] *= 2.0

    ts.index_launch(axis="tp")(step)(Y)
    want = y.copy()
    for k in range(3):
        want[1, 3 * k:3 * k + 2] = 5.0
    want[2:4] *= 2.0
    assert same_bits(Y, want)


def test_a_write_to_a_read_region_names_the_line() -> None:
    def step(W: Region[read], Y: Region[write]) -> None:
        W[0, 0] = 1.0  # here

    def plain(W: Any) -> None:
        W += 1.0  # here

    for body, n in ((step, 2), (plain, 1)):
        with pytest.raises(ts.RegionError) as info:
            ts.index_launch(axis="tp")(body)(*[cols(arr(4, 9)) for _ in range(n)])
        assert info.value.loc.line == line_of(body, "# here") and "'W'" in str(info.value)
        assert "Region[write]" in str(info.value)


def test_reduce_regions_combine_contributions_in_index_order() -> None:
    g = np.array([1e8, 0.0], np.float32)
    V = dist.from_numpy(np.array([[1.0, 2.0], [-1e8, 3.0], [0.5, 4.0]], np.float32),
                        mesh=M, layout=dist.ShardSpec(("row",), ("tp",)))

    def step(v: Any, G: Region[reduce]) -> None:
        G += ts.reshape(v, (2,))

    ts.index_launch(axis="tp")(step)(V, g)
    rows = np.asarray(V)
    assert same_bits(g, reduce_in_order([np.array([1e8, 0.0], np.float32), *rows], ts.f32))
    m = np.zeros(2, np.float32)

    def top(v: Any, G: Region[reduce("max")]) -> None:
        G += ts.reshape(v, (2,))

    ts.index_launch(axis="tp")(top)(V, m)
    assert same_bits(m, np.array([1.0, 4.0], np.float32))


def test_reduce_into_a_sharded_region_adds_to_each_index_part() -> None:
    y = arr(4, 9)
    Y = cols(y)

    def step(Y: Region[reduce]) -> None:
        Y += 1.0

    ts.index_launch(axis="tp")(step)(Y)
    assert same_bits(Y, y + np.float32(1.0))


def test_indices_that_interfere_are_reported() -> None:
    shared = dist.tensor(shape=(4, 9), mesh=M, dtype="f32")  # replicated over tp

    def step(Y: Region[write]) -> None:
        Y[...] = 1.0

    raises_here(ts.RegionConflictError, lambda: ts.index_launch(axis="tp")(step)(shared),
                "write", "Region[reduce]")
    Y = cols(arr(4, 9))

    def aliased(A: Region[read], B: Region[write]) -> None:
        B[...] = ts.transpose(ts.transpose(A))

    full = dist.from_numpy(arr(4, 9), mesh=M)
    raises_here(ts.RegionConflictError, lambda: ts.index_launch(axis="tp")(aliased)(full, full),
                "read")
    ts.index_launch(axis="tp")(aliased)(Y, Y)  # each index reads and writes its own part


def _writer(Y: Region[write]) -> None:
    Y[...] = 2.0


def _reader(Y: Region[read], Z: Region[write]) -> None:
    Z[...] = Y * 3.0


def _adder(Z: Region[reduce]) -> None:
    Z += 1.0


def test_dependences_of_a_launch_sequence() -> None:
    Y, Z, U = cols(arr(4, 9)), cols(arr(4, 9)), cols(arr(4, 9))
    launch = ts.index_launch(axis="tp")
    with dist.launch_graph() as plan:
        launch(_writer)(Y)        # 0
        launch(_reader)(Y, Z)     # 1: RAW on Y
        launch(_writer)(U)        # 2: independent
        launch(_adder)(Z)         # 3: WAW on Z after 1
        launch(_writer)(Y)        # 4: WAR on Y after 1 (WAW after 0 is implied)
    g = plan.graph
    assert isinstance(g, nx.DiGraph) and nx.is_directed_acyclic_graph(g)
    assert set(g.edges) == {(0, 1), (1, 3), (1, 4)}
    assert g.edges[0, 1]["kinds"] == {"RAW Y"} and g.edges[1, 4]["kinds"] == {"WAR Y"}
    assert plan.waves() == [[0, 2], [1], [3, 4]]
    assert same_bits(Z, np.full((4, 9), 7.0, np.float32))


def test_concurrent_launches_that_overlap_are_conflicts() -> None:
    Y, Z = cols(arr(4, 9)), cols(arr(4, 9))
    launch = ts.index_launch(axis="tp")
    with pytest.raises(ts.RegionConflictError, match="WAW on 'Y'"), \
            dist.launch_graph() as plan:
        with plan.concurrent():
            launch(_writer)(Y)
            launch(_writer)(Y)
    with pytest.raises(ts.RegionConflictError, match="RAW"), dist.launch_graph() as plan:
        with plan.concurrent():
            launch(_writer)(Y)
            launch(_reader)(Y, Z)
    with dist.launch_graph() as plan:  # reductions with one op commute
        with plan.concurrent():
            launch(_adder)(Z)
            launch(_adder)(Z)
    assert plan.conflicts() == [] and plan.waves() == [[0, 1]]
