"""Tensor updates from several CTAs (tessera.lower.rules.ordered.windows): a split-K GEMM's
``C[...] += slice`` and rows folded into shared windows give the tile interpreter's bits
in the Target IR interpreter whichever order the CTAs' atomics land in, with no float
``red`` in the PTX; the plan groups CTAs by window and refuses overlapping windows; the
PTX text keeps the order launch after launch on its module variables."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.frontend.kernel.backends.compile import compile_kernel
from tessera.lower.rules.ordered import windows as ordered_tiles
from tessera.lower.rules.ordered.windows import NO_ROW, plan_windows
from tests.lower import kernels
from tests.lower.sm90a.epilogue_kernels import product
from tests.lower.test_ordered import F32_RED, _target_result, _tile_result

TARGETS = ("sm_80", "sm_90a")
ORDERS = ("ascending", "descending")


@ts.kernel
def fold_rows(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["B", "C", ts.f32]):
    """Tile i adds row i of ``x`` into row ``i % B`` of ``out``."""
    out[tile_m % B, 0:C] += x[tile_m, 0:C]


def _spread(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Magnitudes far apart, so that the order of the additions shows in the bits."""
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-4, 5, shape)).astype(np.float32)


@pytest.mark.parametrize("target", TARGETS)
def test_split_k_gemm_has_the_tile_bits_in_either_order(target: str) -> None:
    """Four K slices per output tile (two output tiles): each slice's f32 product is
    added in slice order; ptxas takes the kernel with no spill and no advisory."""
    rng = np.random.default_rng(5)
    a = _spread(rng, (128, 128)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    c = rng.standard_normal((128, 64)).astype(np.float32)
    launch: dict[str, Any] = {"tile_shape": (64, 64, 32)}
    want = _tile_result(kernels.gemm_split_k, a, b, c, **launch)[2]
    for order in ORDERS:
        got = _target_result(kernels.gemm_split_k, a, b, c, target=target, cta_order=order,
                             **launch)[2]
        assert got.tobytes() == want.tobytes(), order
    compiled = compile_kernel(kernels.gemm_split_k, a, b, c, target=target, **launch)
    assert F32_RED not in compiled.ptx and compiled.ptx.count("fence.acq_rel.gpu;") == 2
    assert ".u32 __tessera_gemm_split_k_tadd0_plan[32] = {0, 4294967295, 4, 0," in compiled.ptx
    log = compiled.assemble().log
    assert "advisory" not in log.lower() and " 0 bytes spill stores" in log


def test_the_inputs_tell_the_orders_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the plan or the rows (``red.global.add.f32``) the descending order gives
    other bits: the test above would see an unordered lowering."""
    rng = np.random.default_rng(5)
    x, out = _spread(rng, (12, 200)), rng.standard_normal((3, 200)).astype(np.float32)
    monkeypatch.setattr(ordered_tiles, "window_plan", lambda *args: None)
    monkeypatch.setattr(ordered_tiles, "rows_into", lambda *args: False)
    launch: dict[str, Any] = {"tile_shape": (1,), "grid": 12}
    want = _tile_result(fold_rows, x, out, **launch)[1]
    got = _target_result(fold_rows, x, out, cta_order="descending", **launch)[1]
    assert got.tobytes() != want.tobytes()


@settings(max_examples=20, deadline=None)
@given(tiles=st.integers(1, 16), bands=st.integers(1, 5), cols=st.integers(1, 300),
       seed=st.integers(0, 2**31 - 1), order=st.sampled_from(ORDERS))
def test_rows_folded_into_bands_have_the_tile_bits(tiles: int, bands: int, cols: int,
                                                   seed: int, order: str) -> None:
    """Any number of tiles adding rows (any length: chunks past the end are guarded)
    into any number of shared windows, in either order of the atomics."""
    rng = np.random.default_rng(seed)
    x, out = _spread(rng, (tiles, cols)), rng.standard_normal((bands, cols)).astype(np.float32)
    launch: dict[str, Any] = {"tile_shape": (1,), "grid": tiles}
    want = _tile_result(fold_rows, x, out, **launch)[1]
    got = _target_result(fold_rows, x, out, cta_order=order, **launch)[1]
    assert got.tobytes() == want.tobytes()


def test_one_tile_per_window_is_a_plain_read_modify_write() -> None:
    """Windows of one tile each need no scratch, no ticket and no atomic."""
    x, out = np.ones((3, 64), np.float32), np.zeros((3, 64), np.float32)
    ptx = compile_kernel(fold_rows, x, out, target="sm_80", tile_shape=(1,)).ptx
    assert "atom" not in ptx and "red." not in ptx.replace("shared.", "")
    assert "__tessera" not in ptx


@ts.kernel
def gemm_adds(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
              C: ts.Tensor["M", "N", ts.f32]):
    """The example GEMM adding its tile into C (one CTA a window)."""
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] += ts.tile.cast(product(A, B), ts.f32)


def test_the_warp_specialised_epilogue_adds_its_own_window_in_place() -> None:
    """The warp-specialised GEMM's ``C += acc``, one CTA a window, is a plain
    read-modify-write in its consumer branch: ``red.global.add.f32`` flushed the
    subnormal sums the tile interpreter keeps (``2^-140 + 0``, ``0 + 2^-140``)."""
    a, b = np.zeros((256, 64), ml_dtypes.bfloat16), np.zeros((64, 256), ml_dtypes.bfloat16)
    a[0, 0] = b[0, 0] = 2.0**-70
    c = _spread(np.random.default_rng(3), (256, 256))
    c[0, :2] = 0.0, np.float32(2.0**-140)
    launch = {"tile_shape": (128, 128, 64)}
    compiled = compile_kernel(gemm_adds, a, b, c, target="sm_90a", **launch)
    assert "setmaxnreg" in compiled.ptx and F32_RED not in compiled.ptx
    got = _target_result(gemm_adds, a, b, c, target="sm_90a", **launch)[2]
    want = _tile_result(gemm_adds, a, b, c, **launch)[2]
    assert got.tobytes() == want.tobytes() and want[0, 0] == want[0, 1] != 0


def test_plan_groups_tiles_by_window_in_tile_order() -> None:
    """Windows at 0, 64, 0, 64, 0: two groups numbered by their first tile; later
    tiles take scratch rows group by group; a shifted window overlapping another is
    refused."""
    footprint = np.arange(16) * 4
    plan = plan_windows(np.array([0, 64, 0, 64, 0]), footprint)
    assert plan is not None
    assert plan.groups.tolist() == [0, 1, 0, 1, 0]
    assert plan.sizes.tolist() == [3, 2] and plan.starts.tolist() == [0, 2]
    assert plan.rows.tolist() == [NO_ROW, NO_ROW, 0, 2, 1]
    assert plan.scratch_rows == 3
    assert plan.words()[:8] == (0, NO_ROW, 3, 0, 1, NO_ROW, 2, 2)
    later_first = plan_windows(np.array([64, 0, 64]), footprint)
    assert later_first is not None and later_first.groups.tolist() == [0, 1, 0]
    assert plan_windows(np.array([0, 32]), footprint) is None


@pytest.mark.parametrize("target", TARGETS)
def test_the_ptx_text_keeps_the_order_launch_after_launch(target: str) -> None:
    """The rendered PTX read back by ``ts.ptx`` and launched three times on the same
    module variables (the plan from its initializer): each launch adds the tile
    interpreter's bits, and the tickets are zero after each."""
    rng = np.random.default_rng(9)
    x, out = _spread(rng, (10, 96)), rng.standard_normal((3, 96)).astype(np.float32)
    launch: dict[str, Any] = {"tile_shape": (1,), "grid": 10}
    compiled = compile_kernel(fold_rows, x, out, target=target, **launch)
    kernel = ts.ptx.load(compiled.ptx).kernel(compiled.name)
    symbols = {v.name: np.frombuffer(v.init, np.uint8).copy() for v in kernel.ir.globals}
    assert sorted(symbols) == [f"__tessera_fold_rows_tadd0_{k}"
                               for k in ("plan", "rows", "tickets")]
    for _ in range(3):
        want = _tile_result(fold_rows, x, out, **launch)[1]
        kernel.run(grid=compiled.grid, block=compiled.block, args=[x, out], symbols=symbols)
        assert out.tobytes() == want.tobytes()
        assert not symbols["__tessera_fold_rows_tadd0_tickets"].any()
