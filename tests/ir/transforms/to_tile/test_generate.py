"""Schedule → Tile generation: the kernels and host program it builds, their goldens,
and the ops it refuses (at the user's line)."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.interp.graph import run_function
from tessera.interp.tile.program import run_program
from tessera.ir.text import parse_module
from tessera.ir.transforms.to_tile import TileGenerationError, lower_module
from tessera.ir.transforms.to_tile.edges import edge_tile, tile_count
from tests.ir.transforms.to_tile import programs

GOLDEN = Path(__file__).parents[3] / "golden" / "to_tile"
RNG = np.random.default_rng(7)


def _args(*shapes: tuple[int, ...]) -> list[np.ndarray]:
    return [RNG.standard_normal(s).astype(np.float32) for s in shapes]


CASES = {
    "chain": (programs.chain, [(64, 48), (64, 48), (48,)]),
    "row_and_matrix": (programs.row_and_matrix, [(100, 48), (48,)]),
    "layernorm": (programs.layernorm, [(32, 64), (64,), (64,)]),
    "softmax_rows": (programs.softmax_rows, [(32, 64)]),
    "long_rows": (programs.long_rows, [(3, 5000)]),
}


def _program(name: str):  # type: ignore[no-untyped-def]
    fn, shapes = CASES[name]
    compiled = ts.jit(fn).compile(*_args(*shapes))
    return compiled, lower_module(compiled.module)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name: str) -> None:
    _, program = _program(name)
    assert str(program) + "\n" == (GOLDEN / f"{name}.tir").read_text()


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernels_print_parse_print(name: str) -> None:
    _, program = _program(name)
    text = str(program.module)
    assert str(parse_module(text)) == text


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_program_gives_the_graph_bits(name: str) -> None:
    fn, shapes = CASES[name]
    args = _args(*shapes)
    compiled = ts.jit(fn).compile(*args)
    program = lower_module(compiled.module)
    want = run_function(compiled.function, args)
    got = run_program(program, args)
    assert [g.tobytes() for g in got] == [w.tobytes() for w in want]


def test_one_kernel_per_fused_group() -> None:
    _, program = _program("chain")
    assert [k.name for k in program.kernels] == ["chain_k0"]
    assert program.launches[0].grid == (4, 1)  # 16-row tiles of whole 48-wide rows
    _, program = _program("row_and_matrix")
    # the row vector and the matrix in one kernel; the 100 rows are one tile
    assert len(program.kernels) == 1 and program.launches[0].grid == (6, 1)
    assert program.results == ["k0_0", "k0_1"]


@pytest.mark.parametrize(("extent", "tile", "want", "count"),
                         [(48, 64, 48, 1), (64, 16, 16, 4), (100, 64, 64, 2), (97, 64, 64, 2),
                          (7, 7, 7, 1), (97, 1, 1, 97)])
def test_edge_tile(extent: int, tile: int, want: int, count: int) -> None:
    """The schedule's tile (the whole loop when shorter), and enough tiles to cover the
    loop: the last one reaches past the edge by less than a tile."""
    got = edge_tile(extent, tile)
    assert got == want and tile_count(extent, got) == count
    assert 0 <= count * got - extent < got


def _line_of(fn: object, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    return start + next(k for k, line in enumerate(lines) if text in line)


def test_sin_is_refused_at_its_line() -> None:
    """The f32 matmuls are generated (exact mma); sin has no tile op."""
    args = _args((8, 16), (16, 32), (32,), (32, 8), (8,))
    compiled = ts.jit(programs.mlp_sin).compile(*args)
    with pytest.raises(TileGenerationError) as err:
        lower_module(compiled.module)
    assert "graph.sin" in str(err.value)
    assert err.value.loc.line == _line_of(programs.mlp_sin, "return op.sin")
    assert err.value.loc.file.endswith("programs.py")


def test_cos_is_refused_at_its_line() -> None:
    compiled = ts.jit(programs.softmax_cos).compile(*_args((8, 16)))
    with pytest.raises(TileGenerationError, match=r"graph\.cos") as err:
        lower_module(compiled.module)
    assert err.value.loc.line == _line_of(programs.softmax_cos, "op.cos")


def test_the_float64_sum_of_mma_is_not_the_graph_product() -> None:
    """Why matmul is refused: three f32 products whose float64 sum loses the last one,
    which decides the f32 rounding of the exact sum (1 + 2^-24 + 2^-80 is above the
    midpoint 1 + 2^-24, so it rounds up; the float64 sum is the midpoint, which rounds
    to even, down)."""
    a = np.array([[1.0, 2.0**-24, 2.0**-40]], np.float32)
    b = np.array([[1.0], [1.0], [2.0**-40]], np.float32)
    (graph,) = run_function(ts.jit(lambda a, b: a @ b).compile(a, b).function, [a, b])
    float64_sum = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
    assert graph[0, 0] == np.float32(1 + 2.0**-23)
    assert float64_sum[0, 0] == np.float32(1.0)


def test_a_result_that_skips_a_loop_is_stored_by_the_first_tiles_only() -> None:
    """A hand-written schedule (the fuser keeps such kernels to one row tile): the row
    vector beside a matrix cut into 16 row tiles: only the programs at row
    coordinate 0 store it (16 programs storing one tile would be a write race)."""
    from tessera.interp import schedule as _schedule_rules  # noqa: F401  (kernel rule)
    from tessera.ir.transforms.to_tile import schedule_to_tile

    fn = parse_module((GOLDEN / "row_beside_matrix.schedule.tir").read_text()).functions["m"]
    program = schedule_to_tile(fn)
    assert program.launches[0].grid == (1, 16)
    assert str(program.kernels[0]).count("tile.if(") == 1
    args = _args((256, 48), (48,))
    want = run_function(fn, args)
    assert [g.tobytes() for g in run_program(program, args)] == [w.tobytes() for w in want]
