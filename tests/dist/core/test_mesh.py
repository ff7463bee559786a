"""Meshes: shape inference (NVL72 included), coordinates, groups, ranks and errors."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import dist
from tessera.dist import MeshError
from tests.mesh_sim.util import raises_here, ref_coords

NVL72 = [f"cuda:{i}" for i in range(72)]


def test_one_axis_shape_is_the_device_count() -> None:
    m = dist.mesh(devices=["cuda:0", "cuda:1", "cuda:2", "cuda:3"], axes=("dp",))
    assert m.shape == (4,) and m.axes == ("dp",) and m.size == 4
    assert m.devices == ("cuda:0", "cuda:1", "cuda:2", "cuda:3")


@pytest.mark.parametrize("axes", list(itertools.permutations(["dp", "tp", "pp"])))
def test_nvl72_factorisation_in_the_given_axis_order(axes: tuple[str, ...]) -> None:
    m = dist.mesh(devices=NVL72, axes=axes)
    assert m.shape == tuple({"dp": 4, "tp": 9, "pp": 2}[a] for a in axes)
    assert dict(zip(m.axes, m.shape)) == {"dp": 4, "tp": 9, "pp": 2}


def test_guide_spellings_build_equal_hashable_values() -> None:
    a = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))
    b = dist.mesh(devices=list(range(72)), axes=("tp", "pp", "dp"), shape=(9, 2, 4))
    c = dist.Mesh(["tp", "pp", "dp"], np.arange(72))
    assert a == b == c and hash(a) == hash(b) == hash(c)
    assert a.shape == (9, 2, 4) and a.devices == tuple(range(72))
    assert len({a, b, c}) == 1
    assert dist.mesh(devices=NVL72, axes=("dp", "tp", "pp")) == \
        dist.mesh(devices=NVL72, axes=("dp", "tp", "pp"), shape=(4, 9, 2))
    with pytest.raises(AttributeError):
        a.shape = (72,)  # type: ignore[misc]


def test_spec_meshes() -> None:
    hybrid = ts.dist.mesh(devices=[f"cuda:{i}" for i in range(16)], axes=("dp", "tp", "pp"),
                          shape=(4, 2, 2))
    assert hybrid.axis_size("dp") == 4 and hybrid.axis_size(("tp", "pp")) == 4
    m = dist.mesh(devices=[f"cuda:{i}" for i in range(8)], axes=("dp", "tp"), shape=(4, 2))
    assert m.coords(m.device_index("cuda:5")) == (2, 1)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_coordinates_are_row_major(shape: list[int]) -> None:
    axes = tuple(f"a{k}" for k in range(len(shape)))
    m = dist.mesh(axes=axes, shape=shape)
    for i in range(m.size):
        c = m.coords(i)
        assert c == ref_coords(i, shape)
        assert m.index(c) == i
        assert m.index(dict(zip(axes, c))) == i
        for a, ck in zip(axes, c):
            assert m.rank_in(a, i) == ck


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.data())
def test_groups_match_a_numpy_reshape(shape: list[int], data: st.DataObject) -> None:
    axes = tuple(f"a{k}" for k in range(len(shape)))
    m = dist.mesh(axes=axes, shape=shape)
    picked = data.draw(st.lists(st.sampled_from(axes), min_size=1, unique=True))
    ids = np.arange(m.size).reshape(shape)
    pos = [axes.index(a) for a in picked]
    rest = [p for p in range(len(shape)) if p not in pos]
    # Move the grouped axes last (in the order named): each row is one group in rank order.
    rows = np.transpose(ids, rest + pos).reshape(-1, int(np.prod([shape[p] for p in pos])))
    expect = sorted(rows.tolist(), key=min)
    assert sorted(m.groups(tuple(picked)), key=min) == expect
    for row in expect:
        for r, i in enumerate(row):
            assert m.rank_in(tuple(picked), i) == r
            assert m.group_of(tuple(picked), i) == row


def test_nvl72_groups() -> None:
    m = dist.mesh(devices=NVL72, axes=("dp", "tp", "pp"))
    tp = m.groups("tp")
    assert len(tp) == 8 and all(len(g) == 9 for g in tp)
    assert tp[0] == list(range(0, 18, 2))
    assert m.groups("pp")[0] == [0, 1]
    assert m.groups("dp")[0] == [0, 18, 36, 54]


def test_device_ids_and_indices() -> None:
    m = dist.mesh(devices=[3, 1, 2, 0], axes="x")
    assert m.device_index(0) == 3  # a device id wins over an index
    s = dist.mesh(devices=["cuda:0", "cuda:1"], axes="x")
    assert s.device_index("cuda:1") == 1 and s.device_index(1) == 1


def test_mesh_errors_name_the_line() -> None:
    raises_here(MeshError, lambda: dist.mesh(devices=range(8), axes=("dp", "tp")), "shape")
    raises_here(MeshError, lambda: dist.mesh(devices=range(8), axes=("a", "b"), shape=(3, 3)),
                "holds 9 devices but 8")
    raises_here(MeshError, lambda: dist.mesh(devices=range(4), axes=("a", "a"), shape=(2, 2)),
                "duplicate")
    raises_here(MeshError, lambda: dist.mesh(devices=["cuda:0", "cuda:0"], axes="x"),
                "more than once")
    raises_here(MeshError, lambda: dist.mesh(devices=range(4), axes=("a", "b"), shape=(4,)),
                "2 axes")
    raises_here(MeshError, lambda: dist.mesh(devices=range(4), axes="a", shape=(0,)),
                "positive")
    raises_here(MeshError, lambda: dist.mesh(devices=range(71), axes=("dp", "tp", "pp")),
                "shape")
    m = dist.mesh(devices=range(4), axes=("a", "b"), shape=(2, 2))
    raises_here(MeshError, lambda: m.axis_size("tp"), "'tp'", "('a', 'b')")
    raises_here(MeshError, lambda: m.groups("zz"), "not an axis")
    raises_here(MeshError, lambda: m.coords(4), "not in 0..3")
    raises_here(MeshError, lambda: m.index((2, 0)), "not in a mesh")
    raises_here(MeshError, lambda: m.device_index("cuda:9"), "not in")
    raises_here(MeshError, lambda: dist.mesh(devices=[[0]], axes="x"), "hashable")
