"""The tile map: which group touches which elements, per barrier phase, and the
sanitizer finding drawn on it."""

from __future__ import annotations

import inspect

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.conformance import planted
from tessera.conformance.kernels.gemm import gemm
from tessera.explain import tiledraw
from tessera.explain.tiledraw import program_section
from tessera.explain.tilemap import SEVERAL, record, record_program
from tessera.interp.tile.errors import SanitizerError
from tests.explain import subjects


def test_saxpy_groups_own_consecutive_blocks() -> None:
    recorder, err = record(subjects.saxpy, subjects.saxpy_arguments(16, 4))
    assert err is None and recorder.group_size == 4
    want = np.arange(16) // 4  # linear id = group * group_size + local id
    for name, direction in (("x", "read"), ("y", "read"), ("y", "written")):
        assert np.array_equal(recorder.tensors[name].owners(direction, 0), want)


def test_gemm_blocks_and_k_slices_per_barrier_phase() -> None:
    a = np.ones((128, 64), ml_dtypes.bfloat16)
    b = np.ones((64, 128), ml_dtypes.bfloat16)
    c = np.zeros((128, 128), np.float32)
    recorder, err = record(gemm, {"A": a, "B": b, "C": c, "tile_shape": (64, 64, 32)})
    assert err is None
    owners = recorder.tensors["C"].owners("written", 4)
    blocks = [owners[i:i + 64, j:j + 64] for i in (0, 64) for j in (0, 64)]
    firsts = {int(blk[0, 0]) for blk in blocks}
    assert all((blk == blk[0, 0]).all() for blk in blocks) and firsts == {0, 1, 2, 3}
    # A: the first K slice before the loop's first barriers, the second after them;
    # each row block is read by the two groups of its block row
    first, second = (recorder.tensors["A"].owners("read", p) for p in (0, 2))
    assert (first[:, :32] == SEVERAL).all() and (first[:, 32:] == -1).all()
    assert (second[:, 32:] == SEVERAL).all() and (second[:, :32] == -1).all()
    assert np.array_equal(c, np.zeros_like(c))  # the recording ran on copies


def _planted(name: str) -> tuple[object, dict[str, object]]:
    case = next(p for p in planted.PLANTED if p.name == name)
    params = list(inspect.signature(case.buggy.fn).parameters)
    return case.buggy, {**dict(zip(params, case.args())), **case.launch}


def test_a_global_write_conflict_is_marked_on_its_tensor() -> None:
    kernel, args = _planted("global-write-conflict.store")
    _, err = record(kernel, args)
    assert isinstance(err, SanitizerError) and err.memory == "out"
    html = tiledraw.section(kernel, args, kernel.specialise((), dict(args))[1]
                            .functions[kernel.name])
    assert 'class="finding"' in html and "global write conflict" in html
    assert html.count('<rect class="finding"') == 1


def test_a_shared_memory_race_is_drawn_on_the_buffer() -> None:
    kernel, args = _planted("race.shared")
    _, err = record(kernel, args)
    assert isinstance(err, SanitizerError) and err.kind == "race"
    tile = kernel.specialise((), dict(args))[1].functions[kernel.name]
    html = tiledraw.section(kernel, args, tile)
    assert "shared buffer allocated at" in html
    assert f"element [{', '.join(map(str, err.index))}]" in html
    assert html.count('<rect class="finding"') == 1


def test_an_out_of_bounds_index_is_named_outside_the_tensor() -> None:
    kernel, args = _planted("out-of-bounds.global")
    tile = kernel.specialise((), dict(args))[1].functions[kernel.name]
    html = tiledraw.section(kernel, args, tile)
    assert "out of bounds" in html and "element [-1] lies outside x" in html


def test_large_tensors_draw_blocks_of_elements() -> None:
    owners = np.repeat(np.arange(4), 64 * 256).reshape(256, 256)
    html = tiledraw.grid_svg(owners, "big")
    assert html.count("<rect") == 64 * 64 and "4x4 elements per cell" in html


def _gated(u, v, b):
    return ts.op.relu(u * v + b) / (ts.op.abs(v) + 1.0)


def test_generated_kernels_get_a_tile_map_each() -> None:
    """A graph function's kernels are recorded launch by launch: the one kernel of an
    elementwise chain on a (4, 1) grid writes every element of its result once, each
    row block by its own program, and the page has a map per kernel."""
    rng = np.random.default_rng(0)
    u, v = (rng.standard_normal((64, 48)).astype(np.float32) for _ in range(2))
    b = rng.standard_normal(48).astype(np.float32)
    lowered = ts.jit(_gated).lower(u, v, b)
    (kernel,) = lowered.kernels
    recorders, err = record_program(lowered.tile, [u, v, b])
    assert err is None and list(recorders) == [kernel.name]
    (written,) = [t for t in recorders[kernel.name].tensors.values()
                  if ("written", 0) in t.maps]
    owners = written.owners("written", 0)
    assert owners.shape == (64, 48) and (owners >= 0).all()
    rows = 64 // kernel.grid[0]
    for g in range(kernel.grid[0]):  # program g owns row block g, nothing else
        assert (owners[g * rows:(g + 1) * rows] == g).all()
    html = program_section(lowered.tile, [u, v, b])
    assert html.count("<h3>") == 1 and kernel.name in html and "<svg" in html
    # the recording run left the caller's arrays alone and did not change the result
    assert np.asarray(lowered.run(u, v, b, backend="tile")).tobytes() == \
        np.asarray(lowered.run(u, v, b)).tobytes()
