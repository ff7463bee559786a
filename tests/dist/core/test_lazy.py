"""Lazy DistTensors (``dist.tensor`` without data): zeros, and a bounded materialisation."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tests.mesh_sim.util import raises_here

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
ROWS = dist.ShardSpec(("row",), ("tp",))


def test_a_lazy_tensor_is_zeros_wherever_it_is_used() -> None:
    t = dist.tensor(shape=(5, 3), mesh=MESH, dtype="bf16", layout=ROWS)
    assert t.is_lazy and t.materialized_nbytes == 0
    assert np.array_equal(np.asarray(t), np.zeros((5, 3)))
    assert np.asarray(t).dtype == ts.bf16.np_dtype
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    f = ts.jit(lambda a, b: ts.sum(ts.matmul(a, b) + 1.0, axis=0))
    got = np.asarray(f(t, x))
    assert np.array_equal(got, np.asarray(f(np.zeros((5, 3), np.float32), x)))
    assert np.array_equal(got, np.full(2, 5.0))  # (0 @ x + 1) summed over 5 rows
    assert [t.shard(d).shape for d in range(4)] == [(2, 3), (1, 3), (1, 3), (1, 3)]


def test_asarray_of_an_absurd_lazy_tensor_names_its_bytes() -> None:
    t = dist.tensor(shape=(10**6, 10**6), mesh=MESH, dtype="bf16", layout=ROWS)
    assert t.nbytes == 2 * 10**12  # metadata costs nothing
    text = raises_here(dist.MaterializeError, lambda: np.asarray(t),
                       "2,000,000,000,000 bytes", "(1000000, 1000000)", "8 GiB")
    assert "dist.DistTensor.max_materialize_bytes" in text
    # one device's block of it is still 500 GB
    raises_here(dist.MaterializeError, lambda: t.shard(0), "500,000,000,000 bytes")
    raises_here(dist.MaterializeError, lambda: ts.jit(lambda v: ts.sum(v))(t), "bytes")
    assert isinstance(dist.MaterializeError("x"), ts.TesseraError)


@pytest.mark.parametrize("data", [False, True])
def test_the_limit_is_exact(monkeypatch, data) -> None:
    t = dist.tensor(shape=(6, 4), mesh=MESH, dtype="f32", layout=ROWS,
                    data=np.ones((6, 4), np.float32) if data else None)
    whole = dist.all_gather(t, "tp") if not data else t
    monkeypatch.setattr(dist.DistTensor, "max_materialize_bytes", 6 * 4 * 4)
    assert np.asarray(t).shape == (6, 4)
    monkeypatch.setattr(dist.DistTensor, "max_materialize_bytes", 6 * 4 * 4 - 1)
    if data:
        # a tensor that holds one global array hands it out without making anything
        assert np.asarray(t).shape == (6, 4)
        parts = dist.from_shards(list(t.shards), mesh=MESH, layout=ROWS)
        raises_here(dist.MaterializeError, lambda: np.asarray(parts), "96 bytes")
    else:
        raises_here(dist.MaterializeError, lambda: np.asarray(whole), "96 bytes")
