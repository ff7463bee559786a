"""Int64 tiles in 32-bit registers (tessera.lower.int64): the interval bounds of the
widened integer arithmetic that saturates as the graph does, the int8 programs they
admit (their bits under ``backend="target"`` are the graph interpreter's, saturation
included) and the int32 ones they refuse."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import op
from tessera.frontend.graph.lowered_target import TargetGenerationError
from tessera.ir.core import walk
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.lower.int64 import S32_BOUND, int64_bounds, int64_fits_s32

TARGETS = ("sm_80", "sm_90a")


def chain(x, y, z):  # type: ignore[no-untyped-def]
    return op.abs(x * y - z) + op.maximum(-x, z)


def linear_relu(x, w, b):  # type: ignore[no-untyped-def]
    return op.relu(x @ w + b)


def _kernel(fn, args):  # type: ignore[no-untyped-def]
    (kernel,) = ts.jit(fn).lower(*args).kernels
    return kernel.function


def _bounds_by_op(fn, args) -> dict[str, list[float]]:  # type: ignore[no-untyped-def]
    kernel = _kernel(fn, args)
    bounds = int64_bounds(kernel)
    out: dict[str, list[float]] = {}
    for instr in walk(kernel.body):
        for v in instr.results:
            if v in bounds:
                out.setdefault(instr.op.name, []).append(bounds[v])
    return out


def test_bounds_of_the_int8_epilogue_and_chain() -> None:
    ones = np.ones((8, 8), np.int8)
    got = _bounds_by_op(linear_relu, [ones, ones, np.ones(8, np.int8)])
    # int8 widened (2^7), then the bias added: below 2^8
    assert got == {"tile.cast": [128, 128], "tile.add": [256]}
    got = _bounds_by_op(chain, [ones] * 3)
    # x * y below 2^14; saturated back to int8 before z is subtracted: below 2^8
    assert got["tile.mul"] == [2**14] and got["tile.sub"] == [2**8]
    assert all(b < S32_BOUND for bs in got.values() for b in bs)


def test_int32_arithmetic_is_not_proved() -> None:
    x = np.ones((4, 4), np.int32)
    kernel = _kernel(lambda a, b: a + b, [x, x])
    assert int64_fits_s32(kernel) is not None
    adds = [int64_bounds(kernel)[i.results[0]] for i in walk(kernel.body)
            if isinstance(i.op, tile_compute.Add)]
    assert adds == [2**32]
    with pytest.raises(TargetGenerationError, match="may leave the 32-bit registers"):
        ts.jit(lambda a, b: a + b).lower(x, x).run(x, x, backend="target", target="sm_80")


@pytest.mark.parametrize("target", TARGETS)
def test_int8_arithmetic_on_target_saturates_as_the_graph(target: str) -> None:
    rng = np.random.default_rng(11)
    edges = np.array([-128, 127, -1, 0, 1, 64, -64], np.int8)
    x, y, z = (np.concatenate([rng.choice(edges, (6, 7)), rng.integers(-128, 128, (5, 7))])
               .astype(np.int8) for _ in range(3))
    lowered = ts.jit(chain).lower(x, y, z)
    want = np.asarray(lowered.run(x, y, z).array)
    got = np.asarray(lowered.run(x, y, z, backend="target", target=target).array)
    assert got.dtype == want.dtype == np.int8 and np.array_equal(got, want)
    # each op saturates: the definition, computed independently
    sat = lambda v: np.clip(v, -128, 127)  # noqa: E731
    wide = [a.astype(np.int64) for a in (x, y, z)]
    ref = sat(np.abs(sat(sat(wide[0] * wide[1]) - wide[2]))
              + np.maximum(sat(-wide[0]), wide[2]))
    assert np.array_equal(got, ref)
