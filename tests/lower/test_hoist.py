"""Broadcast hoisting (``tessera.lower.hoist``): broadcasts of computed tiles become
broadcasts of their sources, the chain recomputed at the broadcast shape, with the same
bits in the tile simulator."""

from __future__ import annotations

import copy

import numpy as np

import tessera as ts
from tessera import op
from tessera.interp.tile.program import run_program
from tessera.ir.core import walk
from tessera.ir.dialects.tile import compute as tile_compute
from tessera.lower.hoist import hoist_broadcasts


def scaled(x, v):  # type: ignore[no-untyped-def]
    return op.maximum(x, v * 0.5 + 1.0) - op.where(v > 0.0, v, -v)


def _broadcast_sources(fn):  # type: ignore[no-untyped-def]
    defs = {r: i for i in walk(fn.body) for r in i.results}
    return [type(defs[i.operands[0]].op).__name__ if i.operands[0] in defs else "arg"
            for i in walk(fn.body) if isinstance(i.op, tile_compute.Broadcast)]


def test_broadcasts_read_sources_and_the_bits_stay() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 12)).astype(np.float32)
    v = rng.standard_normal((1, 12)).astype(np.float32)
    program = ts.jit(scaled).lower(x, v).tile
    kernel = program.kernels[0]
    before = str(kernel)
    # the generated kernel broadcasts two computed vectors (each op's NaN fix-up last)
    assert _broadcast_sources(kernel) == ["Where", "Where"]
    hoisted = hoist_broadcasts(kernel)
    assert str(kernel) == before  # the generated kernel is left as it is
    assert _broadcast_sources(hoisted) == ["Load"]  # one broadcast of the loaded v
    other = copy.copy(program)
    other.module = ts.ir.Module(program.module.name, {kernel.name: hoisted})
    want = run_program(program, [x, v])
    got = run_program(other, [x, v])
    assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
