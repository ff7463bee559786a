"""Region privileges in a module with ``from __future__ import annotations``.

Here every annotation is a string; ``index_launch`` evaluates it against the names the
function sees (module globals, closure, the locals of the scope that launches it).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import tessera as ts
from tessera import Region, dist, read, reduce, write
from tessera.dist.core.regions import privileges_of

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
COLS = dist.ShardSpec(("col",), ("tp",))
W_NP = np.arange(32, dtype=np.float32).reshape(4, 8) / 4


def _w() -> dist.DistTensor:
    return dist.from_numpy(W_NP, mesh=MESH, layout=COLS)


def test_the_annotations_here_are_strings() -> None:
    def body(W: Region[read]) -> None: ...

    assert inspect.get_annotations(body) == {"W": "Region[read]", "return": "None"}


def test_write_regions_are_written_back() -> None:
    def scale(W: Region[read], Y: Region[write]):
        Y[...] = W * 2.0

    out = dist.tensor(shape=(4, 8), mesh=MESH, dtype="f32", layout=COLS)
    ts.index_launch(axis="tp")(scale)(_w(), out)
    assert np.array_equal(np.asarray(out), W_NP * 2.0)


def test_reduce_regions_combine_in_index_order() -> None:
    def column_max(W, G: Region[reduce("max")]):
        G += ts.reshape(ts.max(ts.all_gather(W, axis="tp", dim=1), axis=0), (8,))

    total = np.full(8, -1.0, np.float32)
    ts.index_launch(axis="tp")(column_max)(_w(), total)
    # every index's contribution is the same column max, combined with the old value
    assert np.array_equal(total, np.maximum(W_NP.max(axis=0), -1.0))


def test_read_regions_are_enforced_at_the_assigning_line() -> None:
    def bad(W: Region[read]):
        W[...] = 0.0  # the line the error names

    line = inspect.getsourcelines(bad)[1] + 1
    with pytest.raises(ts.RegionError) as info:
        ts.index_launch(axis="tp")(bad)(_w())
    assert info.value.loc.line == line and "only read" in str(info.value)


def test_local_imports_closures_and_other_annotations() -> None:
    from tessera import Region as R
    from tessera import write as w

    privilege = write

    def body(X: ts.Tensor["B", "D", ts.f32], Y: R[w], Z: Region[privilege], q: int = 0):
        Y[...] = X
        Z[...] = X + 1.0

    assert privileges_of(body) == {"Y": write, "Z": write}
    y = dist.tensor(shape=(4, 8), mesh=MESH, dtype="f32", layout=COLS)
    z = dist.tensor(shape=(4, 8), mesh=MESH, dtype="f32", layout=COLS)
    ts.index_launch(axis="tp")(body)(_w(), y, z)
    assert np.array_equal(np.asarray(y), W_NP)
    assert np.array_equal(np.asarray(z), W_NP + 1.0)


def test_unresolvable_annotations() -> None:
    def other(Y: Region[write], Z: NotAName):  # a string Python never evaluates
        Y[...] = 1.0

    assert privileges_of(other) == {"Y": write}  # not a region: ignored

    def broken(Y: Region[wrote]):
        Y[...] = 1.0

    for attempt in (lambda: privileges_of(broken), lambda: ts.index_launch(axis="tp")(broken)):
        with pytest.raises(ts.RegionError) as err:
            attempt()
        text = str(err.value)
        assert err.value.loc.line == inspect.getsourcelines(broken)[1]  # the def line
        assert "Region[wrote]" in text and "'Y'" in text and "hint:" in text

    def not_a_privilege(Y: Region[3]):
        Y[...] = 1.0

    with pytest.raises(ts.RegionError, match="names no privilege"):
        ts.index_launch(axis="tp")(not_a_privilege)
