"""The Tile IR -> Target IR lowering, end to end: every example kernel, on every
target and several shapes, gives the same bits under the Target IR interpreter as
under the tile interpreter, and its PTX assembles with no ptxas advisory."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.backend.ptx.driver import cuda_available
from tessera.errors import UnsupportedError
from tessera.frontend.kernel.backends.compile import compile_kernel

ROOT = Path(__file__).resolve().parents[2]
HAVE_GPU = cuda_available()[0]
TARGETS = ("sm_80", "sm_90a")
BF16 = ml_dtypes.bfloat16


def example(name: str) -> Any:
    """A fresh module of tessera/conformance/kernels, imported by path."""
    path = ROOT / "tessera" / "conformance" / "kernels" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_kernels_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def same_bits(kernel: Any, *args: Any, target: str, spills: bool = False,
              **launch: Any) -> None:
    """The lowered kernel equals the tile interpreter bit for bit, and assembles (with
    no spills unless ``spills``: one warpgroup holding 128x128 f32 scores spills); on a
    machine with a GPU, its launch there gives the same bits too."""
    ts.check_against_reference(kernel, *args, backend="target", target=target, **launch)
    if HAVE_GPU:
        ts.check_against_reference(kernel, *args, backend="cuda", target=target,
                                   bitwise=True, **launch)
    compiled = compile_kernel(kernel, *args, target=target, **launch)
    stats = compiled.assemble().stats[kernel.name]
    assert stats.registers > 0 and (spills or stats.spill_stores == 0)


rng = np.random.default_rng(2024)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n, grid", [(1000, None), (257, 300), (64, 16)])
def test_saxpy(target: str, n: int, grid: int | None) -> None:
    saxpy = example("saxpy").saxpy
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    launch = {} if grid is None else {"grid": grid}
    same_bits(saxpy, x, y, 2.5, target=target, **launch)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n, groups, size", [(4096, 4, 128), (1000, 3, 64), (64, 1, 32)])
def test_block_reduction(target: str, n: int, groups: int, size: int) -> None:
    mod = example("cooperative_reduction")
    data = rng.standard_normal(n).astype(np.float32)
    same_bits(mod.block_reduction, data, np.zeros(1, np.float32), target=target, grid=groups,
              group_size=size)
    same_bits(mod.cooperative_reduction, data, target=target, grid=1, group_size=size)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape, bm", [((64, 256), 4), ((32, 1024), 1), ((16, 64), 8),
                                       ((8, 32), 2)])
def test_row_softmax(target: str, shape: tuple[int, int], bm: int) -> None:
    softmax = example("row_softmax").row_softmax
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, 0.0] if shape[1] > 3 else x[0, :3]
    same_bits(softmax, x, np.zeros_like(x), target=target, tile_shape=(bm,))


@settings(max_examples=6, deadline=None)
@given(target=st.sampled_from(TARGETS), bm=st.sampled_from([64, 128]),
       bn=st.sampled_from([32, 64, 128]), bk=st.sampled_from([32, 64]),
       tiles=st.tuples(st.integers(1, 2), st.integers(1, 2), st.integers(1, 3)))
def test_gemm_tile_shapes(target: str, bm: int, bn: int, bk: int,
                          tiles: tuple[int, int, int]) -> None:
    gemm = example("gemm").gemm
    m, n, k = bm * tiles[0], bn * tiles[1], bk * tiles[2]
    a = rng.standard_normal((m, k)).astype(BF16)
    b = rng.standard_normal((k, n)).astype(BF16)
    same_bits(gemm, a, b, np.zeros((m, n), np.float32), target=target, tile_shape=(bm, bn, bk))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tile", [(64, 64, 64), (64, 64, 32)])
def test_double_buffered_gemm(target: str, tile: tuple[int, int, int]) -> None:
    """A two-stage copy ring with wait_group(1): cp.async on sm_80; on sm_90a the
    run-time-selected stages are filled by TMA through the mbarrier group ring."""
    kernel = example("double_buffered_gemm").double_buffered_gemm
    a = rng.standard_normal((128, 128)).astype(BF16)
    b = rng.standard_normal((128, 128)).astype(BF16)
    same_bits(kernel, a, b, np.zeros((128, 128), np.float32), target=target, tile_shape=tile)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("bh, seq, d, block", [(2, 128, 64, 64), (1, 128, 64, 128),
                                               (2, 128, 32, 64)])
def test_flash_attention(target: str, causal: bool, bh: int, seq: int, d: int,
                         block: int) -> None:
    fa = example("flash_attention").flash_attention
    q, k, v = (rng.standard_normal((bh, seq, d)).astype(BF16) for _ in range(3))
    config = dict(BLOCK_M=block, BLOCK_N=block, num_warps=4, num_stages=2)
    same_bits(fa, q, k, v, is_causal=causal, target=target, config=config, spills=block > 64)


@pytest.mark.parametrize("shape, tile", [((128, 128, 256), (64, 64, 128)),
                                         ((64, 128, 128), (64, 128, 64))])
def test_fp8_gemm_sm90a(shape: tuple[int, int, int], tile: tuple[int, int, int]) -> None:
    fp8 = example("fp8_gemm").fp8_gemm
    m, n, k = shape
    a = rng.standard_normal((m, k)).astype(ml_dtypes.float8_e4m3fn)
    bt = rng.standard_normal((n, k)).astype(ml_dtypes.float8_e4m3fn)
    same_bits(fp8, a, bt, np.zeros((m, n), np.float32), target="sm_90a", tile_shape=tile)
    ptx = compile_kernel(fp8, a, bt, np.zeros((m, n), np.float32), target="sm_90a",
                         tile_shape=tile).ptx
    assert ".e4m3.e4m3" in ptx and "cp.async.bulk.tensor" in ptx


def test_fp8_gemm_has_no_sm80_lowering() -> None:
    fp8 = example("fp8_gemm").fp8_gemm
    a = np.zeros((64, 64), ml_dtypes.float8_e4m3fn)
    with pytest.raises(UnsupportedError) as info:
        compile_kernel(fp8, a, a, np.zeros((64, 64), np.float32), target="sm_80",
                       tile_shape=(64, 64, 64))
    assert "fp8_gemm.py" in str(info.value)


def test_sm90a_gemm_uses_tma_mbarrier_and_wgmma() -> None:
    gemm = example("gemm").gemm
    a, b = np.zeros((128, 64), BF16), np.zeros((64, 128), BF16)
    ptx = compile_kernel(gemm, a, b, np.zeros((128, 128), np.float32), target="sm_90a",
                         tile_shape=(64, 64, 64)).ptx
    for needle in ("cp.async.bulk.tensor.2d", "mbarrier.arrive.expect_tx", "wgmma.fence",
                   "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16",
                   "wgmma.commit_group", "wgmma.wait_group", ".target sm_90a"):
        assert needle in ptx, needle
    ptx80 = compile_kernel(gemm, a, b, np.zeros((128, 128), np.float32), target="sm_80",
                           tile_shape=(64, 64, 32)).ptx
    for needle in ("cp.async.cg.shared.global", "ldmatrix.sync.aligned.m8n8.x4",
                   "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", ".target sm_80"):
        assert needle in ptx80, needle


def _memory_cases() -> list[tuple[str, str, Any, dict[str, Any]]]:
    r = np.random.default_rng(11)
    a = np.arange(128 * 192, dtype=np.float32).reshape(128, 192)
    src = r.standard_normal((64, 96)).astype(BF16)
    x = r.standard_normal(1000).astype(np.float32)
    return [
        ("memory_hierarchy", "memory_hierarchy_example", lambda: (a, np.zeros_like(a)),
         {"tile_shape": (64, 64)}),
        ("optimized_memory_access", "optimized_memory_access",
         lambda: (src, np.zeros_like(src)), {"tile_shape": (32, 32)}),
        ("process_chunks", "process_chunks", lambda: (x, np.zeros_like(x)),
         {"grid": 8, "group_size": 4}),
        ("tile_example", "tile_example", lambda: (np.arange(100, dtype=np.float32),),
         {"grid": 13, "group_size": 8}),
        ("tile_example", "tile_example", lambda: (np.arange(100, dtype=np.float32),), {}),
    ]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", range(len(_memory_cases())))
def test_other_examples(target: str, case: int) -> None:
    """The remaining example kernels: register and vector memory ops, a swizzled shared
    buffer read back elementwise, groups of scalar tiles, a global read-modify-write."""
    module, name, make, launch = _memory_cases()[case]
    same_bits(getattr(example(module), name), *make(), target=target, **launch)


@pytest.mark.parametrize("n", [200, 128, 1])
def test_packed_scalar_kernels_guard_the_tail(n: int) -> None:
    """128 single-tile groups share a CTA; the threads past the last group do nothing
    (an unguarded kernel would otherwise write past the end of its array)."""
    from tests.lower import kernels

    x = rng.standard_normal(n).astype(np.float32)
    for target in TARGETS:
        same_bits(kernels.scale_unguarded, x, target=target)
        same_bits(kernels.first_element, x, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_f16_gemm(target: str) -> None:
    from tests.lower import kernels

    a = rng.standard_normal((128, 128)).astype(np.float16)
    b = rng.standard_normal((128, 64)).astype(np.float16)
    same_bits(kernels.gemm_f16, a, b, np.zeros((128, 64), np.float32), target=target,
              tile_shape=(64, 64, 64))
    ptx = compile_kernel(kernels.gemm_f16, a, b, np.zeros((128, 64), np.float32),
                         target=target, tile_shape=(64, 64, 64)).ptx
    assert ".f16.f16" in ptx


@pytest.mark.parametrize("target", TARGETS)
def test_tensor_updates_reduce_in_group_order(target: str) -> None:
    """'+=' of tensors from many CTAs is red.global.add; both interpreters apply it in
    group order. The seed's '+=' of a raw mma accumulator is refused at its line."""
    from tests.lower import kernels

    a = rng.standard_normal((128, 128)).astype(BF16)
    b = rng.standard_normal((128, 64)).astype(BF16)
    same_bits(kernels.gemm_split_k, a, b, np.zeros((128, 64), np.float32), target=target,
              tile_shape=(64, 64, 32))
    x = rng.standard_normal((5, 64)).astype(np.float32)
    same_bits(kernels.accumulate_rows, x, np.zeros(64, np.float32), target=target,
              tile_shape=(1,), grid=5)
    from tessera.conformance import tile_seeds as seeds

    with pytest.raises(UnsupportedError, match="mma accumulator") as info:
        compile_kernel(seeds.gemm, a, b, np.zeros((128, 64), np.float32), target=target)
    assert "seeds.py" in str(info.value)


@pytest.mark.parametrize("target", TARGETS)
def test_comparison_of_memory_lowers(target: str) -> None:
    """``x[i:i+32] > 0.0`` compares a memory view directly; the lowering reads it into
    registers first, as it does for arithmetic."""
    from tests.lower.kernels import positive_mask

    x = rng.standard_normal(128).astype(np.float32)
    x[::7] = -0.0
    out = np.zeros_like(x)
    positive_mask(x, out, grid=4)
    assert np.array_equal(out, np.where(x > 0, x, 0).astype(np.float32))
    same_bits(positive_mask, x, np.zeros_like(x), grid=4, target=target)


@pytest.mark.parametrize("target", TARGETS)
def test_a_cast_of_an_accumulator_rounds_once_as_its_store_does(target: str) -> None:
    """``cast(acc, bf16)`` rounds the exact sum once, to bf16, as storing ``acc`` into
    bf16 memory does (docs/kernels.md, section 7): ``1 + 2^-8 + 2^-30`` is ``1 + 2^-7``.
    The lowering rounded it to f32 first (a bf16 tie, to even: 1), and so differed from
    the tile interpreter wherever that f32 rounding met a bf16 tie."""
    from tests.lower import kernels

    a, b = np.zeros((64, 64), ml_dtypes.bfloat16), np.zeros((64, 64), ml_dtypes.bfloat16)
    a[0, :3] = 1.0, 2.0**-8, 2.0**-30
    b[:3, 0] = 1.0
    c, d = np.zeros_like(a), np.zeros_like(a)
    launch = {"grid": 1, "tile_shape": (64, 64, 64)}
    kernels.cast_and_store(a, b, c, d, **launch)
    assert float(c[0, 0]) == float(d[0, 0]) == 1 + 2.0**-7
    ts.check_against_reference(kernels.cast_and_store, a, b, np.zeros_like(a),
                               np.zeros_like(a), backend="target", target=target, **launch)
