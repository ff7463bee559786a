"""Arguments of collectives: dims, ranks and permutations, in every view.

A collective is called on a DistTensor (the core, at once), on a traced value under
``@ts.jit`` (a placement change) or in an ``index_launch`` body (the local view). In
each view an out-of-range dim or rank, a non-integer one, or a ``perm`` in which a rank
sends or receives twice is a TesseraError at the line of the call, never a value taken
modulo the size (Python indexing) or an internal exception.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tests.mesh_sim.util import raises_here

MESH = dist.mesh(axes=("dp", "tp"), shape=(2, 4))
X_NP = np.arange(48, dtype=np.float32).reshape(8, 6)
X = dist.from_numpy(X_NP, mesh=MESH, layout=dist.ShardSpec(("row",), ("tp",)))
# per-device values along tp (replicated over dp): what broadcast and ppermute move
P = dist.from_shards([np.full((8, 6), i % 4, np.float32) for i in range(8)], mesh=MESH,
                     partial=("tp",))

Call = Callable[[Any], Any]


def _line() -> int:
    """The caller's line: written on the line of a collective's call."""
    return inspect.currentframe().f_back.f_lineno  # type: ignore[union-attr]


def _raises_at(exc: type[BaseException], thunk: Callable[[], Any], line: int, *words: str
               ) -> str:
    """``thunk`` raises ``exc``, a TesseraError at ``line`` of this file with a hint
    and ``words`` (the line of the collective, inside a traced or launched body)."""
    with pytest.raises(exc) as info:
        thunk()
    err, text = info.value, str(info.value)
    assert isinstance(err, ts.TesseraError), text
    assert (os.path.basename(err.loc.file), err.loc.line) == (os.path.basename(__file__),
                                                              line), text
    assert "hint:" in text and all(w in text for w in words), text
    return text


def _views(call: Call, partial_ok: bool = False) -> list[tuple[str, Callable[[], Any]]]:
    """The collective ``call(x)`` in each view, as thunks."""
    views = [("jit", lambda: ts.jit(call)(X)),
             ("jit of a computed value", lambda: ts.jit(lambda v: call(ts.tanh(v)))(X)),
             ("launch", lambda: ts.index_launch(axis="tp")(call)(X))]
    return [("eager", lambda: call(P if partial_ok else X)), *views]


BAD_DIMS = [(2, ts.ShapeError, "out of range"), (-3, ts.ShapeError, "out of range"),
            (5, ts.ShapeError, "dim 5"), (1.5, ts.ArgumentError, "1.5"),
            (True, ts.ArgumentError, "True"), ("x", ts.TesseraError, "'x'")]


@pytest.mark.parametrize(("dim", "exc", "word"), BAD_DIMS)
def test_out_of_range_and_non_integer_dims(dim, exc, word) -> None:
    calls = {
        "reduce_scatter": (lambda v: ts.reduce_scatter(v, "tp", dim=dim), _line(), True),
        "all_to_all": (lambda v: ts.all_to_all(v, "tp", dim, 0), _line(), False),
        "concat": (lambda v: ts.all_to_all(v, "tp", 1, dim), _line(), False)}
    for name, (call, line, partial_ok) in calls.items():
        for view, thunk in _views(call, partial_ok):
            if view == "eager" and dim == "x":
                continue  # the core reads strings as dim names ("x" is not one, below)
            text = _raises_at(exc, thunk, line, word)
            assert "between" in text or "'row', 'col'" in text, (name, view, text)
    gather, line = (lambda v: ts.all_gather(v, "tp", dim=dim)), _line()
    for _, thunk in _views(gather)[1:]:  # the core's all_gather takes no dim
        _raises_at(exc, thunk, line, word)
    raises_here(ts.TesseraError, lambda: dist.reduce_scatter(P, "tp", dim="x"), "'x'")


def test_in_range_dims_still_work_in_every_view() -> None:
    for dim in (0, -2, "row"):
        want = np.asarray(ts.jit(lambda v, d=dim: ts.reduce_scatter(v, "tp", dim=d))(X))
        assert np.array_equal(want, X_NP)
    got = ts.index_launch(axis="tp")(lambda v: ts.all_gather(v, "tp", dim=-1))(X)
    assert np.asarray(got).shape == (2, 24)  # each index's (2, 6) rows side by side


BAD_PERMS = [([(0, 1), (1, 1)], "destination twice"), ([(0, 1), (0, 2)], "source twice"),
             ([(0, 4)], "dst 4"), ([(-1, 0)], "src -1"), ([(1.5, 0)], "src 1.5"),
             ([(0, 1, 2)], "not (src, dst)"), ("01", "not a list"),
             ([(0, 0), (1, 1), (2, 2), (3, 3), (3, 0)], "twice")]


@pytest.mark.parametrize(("perm", "word"), BAD_PERMS)
def test_ppermute_takes_only_permutations_of_real_ranks(perm, word) -> None:
    call, line = (lambda v: dist.ppermute(v, "tp", perm)), _line()
    for _, thunk in _views(call, partial_ok=True):
        _raises_at(ts.MeshError, thunk, line, word)


def test_ppermute_of_a_partial_permutation_is_allowed() -> None:
    got = ts.index_launch(axis="tp", out_dims=0)(
        lambda v: dist.ppermute(v, "tp", [(0, 1)]))(X)
    want = np.zeros_like(X_NP)
    want[2:4] = X_NP[0:2]  # index 1 receives index 0's rows; the others hold zeros
    assert np.array_equal(np.asarray(got), want)


@pytest.mark.parametrize("root", [-1, -4, 4, 10**20, 1.5, True, "0"])
def test_broadcast_root_must_be_a_rank(root) -> None:
    call, line = (lambda v: dist.broadcast(v, "tp", root=root)), _line()
    for _, thunk in _views(call, partial_ok=True):
        _raises_at(ts.MeshError, thunk, line, "root", "not a rank in 0..3")


@pytest.mark.parametrize("root", [0, 3, np.int64(2)])
def test_broadcast_of_a_valid_root_in_a_launch_body(root) -> None:
    got = ts.index_launch(axis="tp")(lambda v: dist.broadcast(v, "tp", root=root))(X)
    assert np.array_equal(np.asarray(got), X_NP[2 * int(root):2 * int(root) + 2])
    eager = dist.broadcast(P, "tp", root=root)
    assert np.array_equal(np.asarray(eager), np.full((8, 6), int(root), np.float32))
