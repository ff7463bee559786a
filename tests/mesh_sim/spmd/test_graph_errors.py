"""Distribution errors end to end (jit, eager operators, launches): TesseraErrors that
name the user's file:line (the offending line of a traced body, or the call) and say
what to do."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import tessera as ts
from tessera import dist
from tessera.dist import MeshError, PlacementError, ShardingError
from tessera.mesh_sim.spmd.lockstep import LaunchError
from tests.mesh_sim.util import raises_here

M = dist.mesh(axes=("dp", "tp"), shape=(2, 3))
OTHER = dist.mesh(axes=("dp", "tp"), shape=(3, 2))
A = np.arange(24, dtype=np.float32).reshape(4, 6)
X = dist.from_numpy(A, mesh=M, layout=dist.ShardSpec(("col",), ("tp",)))


def raises_at(exc: type[BaseException], fn: Callable[[], Any], body: Callable[..., Any],
              marker: str, *words: str) -> str:
    """``fn()`` raises ``exc`` located at the line of ``body`` that contains ``marker``."""
    lines, first = inspect.getsourcelines(body)
    line = first + next(k for k, text in enumerate(lines) if marker in text)
    with pytest.raises(exc) as info:
        fn()
    err = info.value
    assert isinstance(err, ts.TesseraError) and err.loc.line == line, str(err)
    assert err.loc.file == __file__ and "hint:" in str(err)
    for w in words:
        assert w in str(err), (w, str(err))
    return str(err)


def test_a_mesh_shape_that_does_not_match_the_devices() -> None:
    raises_here(MeshError, lambda: dist.mesh(devices=range(8), axes=("dp", "tp"),
                                             shape=(4, 3)), "12 devices", "8")
    raises_here(MeshError, lambda: dist.mesh(devices=range(10), axes=("dp", "tp")), "shape")


def test_a_shard_spec_with_more_partitions_than_dims() -> None:
    spec = dist.ShardSpec(partition=("row", "col"), mesh_axes=("dp", "tp"))
    raises_here(ShardingError, lambda: dist.from_numpy(np.ones(4, np.float32), mesh=M,
                                                       layout=spec), "1 dim")


def test_an_unknown_axis_in_a_traced_collective() -> None:
    def body(x: Any) -> Any:
        return ts.all_gather(x, axis="ep")  # here

    raises_at(MeshError, lambda: ts.jit(body)(X), body, "# here", "'ep'", "dp", "tp")


def test_a_collective_over_an_axis_the_mesh_lacks() -> None:
    def body(x: Any) -> Any:
        y = ts.exp(x)
        return ts.all_reduce(y, axis="pp")  # here

    raises_at(MeshError, lambda: ts.jit(body)(X), body, "# here", "'pp'")
    raises_at(MeshError, lambda: ts.grad(lambda x: ts.sum(body(x)))(X), body, "# here")


def test_operands_on_different_meshes() -> None:
    Y = dist.from_numpy(A, mesh=OTHER)
    raises_here(MeshError, lambda: ts.jit(lambda a, b: a + b)(X, Y), "different meshes")
    raises_here(MeshError, lambda: ts.add(X, Y), "different meshes")
    raises_here(MeshError, lambda: ts.index_launch(axis="tp")(lambda a, b: a)(X, Y),
                "different meshes")


def test_a_reduction_that_is_not_a_function_of_the_global_value() -> None:
    def body(x: Any) -> Any:
        return ts.all_reduce(ts.sum(x, axis=1), axis="tp", op="max")  # here

    raises_at(PlacementError, lambda: ts.jit(body)(X), body, "# here", "partial(sum)",
              "index_launch")

    def moves(x: Any) -> Any:
        return dist.ppermute(ts.sum(x, axis=1), axis="tp", perm=[(0, 1)])  # here

    raises_at(PlacementError, lambda: ts.jit(moves)(X), moves, "# here", "ppermute")


def test_launch_errors() -> None:
    raises_here(MeshError, lambda: ts.index_launch(axis="ep")(lambda a: a)(X), "'ep'")
    raises_here(LaunchError, lambda: ts.index_launch(axis="tp")(lambda a: a)(A),
                "no DistTensor")

    def diverges(a: Any) -> Any:
        if dist.axis_index("tp") == 1:
            return a
        return ts.all_reduce(a, axis="tp")  # here

    raises_at(LaunchError, lambda: ts.index_launch(axis="tp")(diverges)(X), diverges,
              "# here", "finished")

    def other_axis(a: Any) -> Any:
        return ts.all_reduce(a, axis="dp")  # here

    raises_at(LaunchError, lambda: ts.index_launch(axis="tp")(other_axis)(X), other_axis,
              "# here", "axis='tp'")
