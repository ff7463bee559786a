"""The TMA-store epilogue of the warp-specialised sm_90a GEMM
(tessera.lower.sm90a.epilogue): its Target IR and PTX, its bits in the Target IR
interpreter against the tile interpreter and an exact reference, ptxas's statistics,
the st.global fallback, and planted bugs the interpreter and the ordering check report."""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.backend.ptx.estimate.census import census
from tessera.errors import IRVerifyError, UnsupportedError
from tessera.frontend.kernel.backends.compile import target_arguments
from tessera.interp.target import TargetFault, run_target
from tessera.interp.target.barriers import BarrierDeadlock
from tessera.ir.core import Block, Function, Instr, walk
from tessera.ir.dialects.target import For, If, TensorMapType
from tessera.ir.dialects.target.async_ops import BulkCommit, BulkWait, Fence, TmaStore
from tessera.ir.dialects.target.check import check_kernel
from tessera.ir.dialects.target.ops import Bar, SharedAlloc, Store
from tessera.ir.dialects.target.ptx_ops import Stmatrix
from tests.lower.sm90a import epilogue_kernels as kernels

ROOT = Path(__file__).resolve().parents[3]
GEMM = runpy.run_path(str(ROOT / "tessera" / "conformance" / "kernels" / "gemm.py"))["gemm"]
BF16 = ml_dtypes.bfloat16
OUT = {"gemm": np.float32, "gemm_bf16": BF16, "gemm_f16": np.float16,
       "gemm_bias_relu_bf16": BF16, "gemm_residual_f16": np.float16,
       "gemm_scale_f32": np.float32}
KERNELS = {"gemm": GEMM, **{k: getattr(kernels, k) for k in OUT if k != "gemm"}}


def arguments(name: str, m: int, n: int, k: int, seed: int = 0,
              pitch: int | None = None) -> list[np.ndarray]:
    """Operands of kernel ``name``; ``pitch``: C's row length (default ``n``)."""
    rng = np.random.default_rng(seed)
    dt = np.float16 if name == "gemm_f16" else BF16
    args = [rng.standard_normal((m, k)).astype(dt), rng.standard_normal((k, n)).astype(dt)]
    if name in ("gemm_bias_relu_bf16", "gemm_scale_f32"):
        args.append(rng.standard_normal(n).astype(np.float32))
    if name == "gemm_residual_f16":
        args.append(rng.standard_normal((m, n)).astype(np.float32))
    args.append(np.zeros((m, pitch or n), OUT[name]))
    return args


def compile_(name: str, m: int, n: int, k: int, tile: tuple[int, int, int],
             config: dict[str, Any] | None = None, **kw: Any) -> Any:
    extra = {"config": config} if config else {}
    return ts.compile_kernel(KERNELS[name], *arguments(name, m, n, k, **kw), target="sm_90a",
                             tile_shape=tile, **extra)


def consumer(fn: Function) -> Block:
    """The consumer branch of the producer/consumer split."""
    for instr in fn.body.instrs:
        if isinstance(instr.op, If) and any(isinstance(i.op, Stmatrix | Store | TmaStore)
                                            for i in walk(instr.regions[1].block)):
            return instr.regions[1].block
    raise AssertionError("no consumer branch")


def ops_in(block: Block) -> list[Instr]:
    return list(walk(block))


# ------------------------------------------------------------------------- structure
@pytest.mark.parametrize("name", ["gemm", "gemm_bf16", "gemm_f16"])
@pytest.mark.parametrize("tile", [(128, 128, 64), (128, 256, 64)])
def test_epilogue_structure(name: str, tile: tuple[int, int, int]) -> None:
    """stmatrix (16-bit outputs) or st.shared.v2.f32 into the staging tile, the proxy
    fence, the consumers' named barrier, one TMA store per 128-byte panel from thread
    0, commit and wait_group.read; the K loops keep no bar.sync; C's tensor map is a
    parameter."""
    bm, bn, _ = tile
    fn = compile_(name, 256, 512, 256, tile).kernel
    assert fn.attrs["epilogue"] == "tma_store"
    consumers = 1 if bm * bn <= 128 * 128 else 2
    esize = 4 if OUT[name] is np.float32 else 2
    body = consumer(fn)
    seq = [i.op for i in ops_in(body)]
    named = [op for op in seq if isinstance(op, Bar)]
    assert [(b.id, b.count) for b in named] == [(1, 128 * consumers)] * 2
    stores = [op for op in seq if isinstance(op, TmaStore)]
    assert len(stores) == bn * esize // 128
    stm = [op for op in seq if isinstance(op, Stmatrix)]
    shared = [op for op in seq if isinstance(op, Store) and op.space == "shared"]
    if esize == 2:  # per 64-row block of the thread's warpgroup and 16 columns
        assert len(stm) == (bm // 64 // consumers) * (bn // 16) and not shared
    else:
        assert not stm and len(shared) == bm * bn // (128 * consumers) // 2
        assert {(op.type, op.vec) for op in shared} == {("f32", 2)}
    assert not [op for op in seq if isinstance(op, Store) and op.space == "global"]
    order = [type(op) for op in seq if isinstance(op, Fence | Bar | TmaStore | BulkCommit
                                                  | BulkWait)]
    assert order == [Bar, Fence, Bar] + [TmaStore] * len(stores) + [BulkCommit, BulkWait]
    assert next(op for op in seq if isinstance(op, BulkWait)) == BulkWait(0, read=True)
    for loop in (i for i in walk(fn.body) if isinstance(i.op, For)):
        assert not any(isinstance(i.op, Bar) for i in walk(loop.regions[0].block))
    maps = [p.type for p in fn.args if isinstance(p.type, TensorMapType)]
    assert maps[-1].arg == 2 and maps[-1].swizzle == 128
    assert maps[-1].box == (bm, 128 // esize)


@pytest.mark.parametrize("name, fence", [("gemm_bf16", "stmatrix"), ("gemm", "st.shared")])
def test_epilogue_ptx(name: str, fence: str) -> None:
    ptx = compile_(name, 256, 512, 256, (128, 256, 64)).ptx
    epi = ptx[ptx.index("bar.sync 1, 256;"):]
    if name == "gemm_bf16":
        assert len(re.findall(r"stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16 \[%r\d+(\+\d+)?\], "
                              r"\{%r\d+, %r\d+, %r\d+, %r\d+\};", epi)) == 16
    else:
        assert "st.shared.v2.f32" in epi and "stmatrix" not in ptx
    tail = epi[epi.index(fence):]
    fence_at = tail.index("fence.proxy.async.shared::cta;")
    bar_at = tail.index("bar.sync 1, 256;")
    store_at = tail.index("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [")
    assert fence_at < bar_at < store_at
    assert tail.index("cp.async.bulk.commit_group;") > store_at
    assert tail.index("cp.async.bulk.wait_group.read 0;") > store_at
    assert "st.global" not in ptx
    assert ptx.count(".align 64 .b8") == 3  # the A, B and C tensor maps
    for body in re.findall(r"(\$L__for_\d+):(.*?)\$L__endfor", ptx, re.S):
        assert "bar.sync" not in body[1]


def test_staging_reuses_the_drained_ring_or_gets_its_own() -> None:
    """A bf16 128x256 tile (64 KiB) fits the drained ring; an f32 one (128 KiB) does not
    fit a two-stage ring (96 KiB) and gets a buffer of its own beside it."""
    def buffers(name: str, config: dict[str, Any] | None) -> dict[str, int]:
        fn = compile_(name, 256, 512, 128, (128, 256, 64), config).kernel
        return {i.op.sym: i.op.size for i in walk(fn.body) if isinstance(i.op, SharedAlloc)}
    ring = buffers("gemm_bf16", None)
    assert not any(s.startswith("epi_stage") for s in ring)
    own = buffers("gemm", {"num_stages": 2})
    assert own["pipe_ring0"] == 2 * (128 + 256) * 64 * 2
    assert [v for s, v in own.items() if s.startswith("epi_stage")] == [128 * 256 * 4]


def test_estimate_counts_the_tma_store() -> None:
    """The static estimate's census stores the C tile once per CTA, from the TMA box."""
    for name, esize in (("gemm_bf16", 2), ("gemm", 4)):
        fn = compile_(name, 256, 256, 256, (128, 128, 64)).kernel
        assert census(fn).global_store_bytes == 128 * 128 * esize


# ------------------------------------------------------------------------------ bits
@pytest.mark.parametrize("name, shape, tile, config", [
    ("gemm_bf16", (256, 256, 256), (128, 128, 64), None),
    ("gemm_bf16", (256, 512, 128), (128, 256, 64), None),
    ("gemm_bf16", (512, 256, 192), (256, 128, 64), {"num_stages": 3}),
    ("gemm_f16", (256, 256, 256), (128, 128, 64), {"num_warps": 12}),
    ("gemm_f16", (128, 128, 192), (64, 64, 64), {"num_stages": 2}),
    ("gemm", (256, 512, 128), (128, 256, 64), {"num_stages": 2}),  # staging beside the ring
    ("gemm", (128, 256, 128), (64, 128, 64), {"num_stages": 2, "num_warps": 8}),
    ("gemm_bias_relu_bf16", (256, 256, 256), (128, 128, 64), None),
    ("gemm_residual_f16", (256, 256, 128), (128, 128, 64), None),
    ("gemm_scale_f32", (128, 256, 128), (64, 128, 64), {"num_stages": 2}),
])
def test_epilogue_has_the_tile_interpreters_bits(
        name: str, shape: tuple[int, int, int], tile: tuple[int, int, int],
        config: dict[str, Any] | None) -> None:
    kw = {"config": config} if config else {}
    args = arguments(name, *shape)
    assert compile_(name, *shape, tile, config).kernel.attrs["epilogue"] == "tma_store"
    ts.check_against_reference(KERNELS[name], *args, backend="target", target="sm_90a",
                               tile_shape=tile, **kw)


def test_bf16_output_is_the_exact_product_rounded() -> None:
    """An independent reference: the exact product (bf16 products are exact in float64,
    and these sums are) rounded to f32 by the accumulation, then to bf16 by the store."""
    a, b, c = arguments("gemm_bf16", 256, 512, 128, seed=3)
    ts.launch(kernels.gemm_bf16, None, (a, b, c), backend="target", target="sm_90a",
              tile_shape=(128, 256, 64))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    want = exact.astype(np.float32).astype(BF16)
    assert np.array_equal(c.view(np.uint16), want.view(np.uint16))


# ----------------------------------------------------------------------------- ptxas
@pytest.mark.parametrize("name", ["gemm", "gemm_bf16", "gemm_f16"])
@pytest.mark.parametrize("tile", [(128, 128, 64), (128, 256, 64)])
def test_ptxas_assembles_the_epilogue_without_spills(name: str,
                                                     tile: tuple[int, int, int]) -> None:
    """``assemble`` fails on any ptxas advisory (C75xx)."""
    pathfinder = pytest.importorskip("cuda.pathfinder")
    if not pathfinder.find_nvidia_binary_utility("ptxas"):
        pytest.skip("ptxas is not installed")
    compiled = compile_(name, 512, 512, 512, tile)
    stats = compiled.assemble().stats[KERNELS[name].name]
    assert stats.spill_stores == 0 and stats.spill_loads == 0 and stats.stack_frame == 0
    assert stats.registers == compiled.kernel.attrs["maxnreg"]


# -------------------------------------------------------------------------- fallback
@ts.kernel
def gemm_wide_c(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                C: ts.Tensor["M", "P", ts.bf16]):
    """C[:, :N] = A @ B in a C whose rows are P elements long."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16, swizzle="xor")
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16, swizzle="xor")
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


def _wide(pitch: int, config: dict[str, Any] | None = None) -> tuple[Any, list[np.ndarray]]:
    args = arguments("gemm_bf16", 256, 256, 128, pitch=pitch)
    kw = {"config": config} if config else {}
    return ts.compile_kernel(gemm_wide_c, *args, target="sm_90a", tile_shape=(128, 128, 64),
                             grid=(2, 2), **kw), args


def test_a_row_pitch_tma_cannot_describe_falls_back_to_st_global() -> None:
    """C rows of 260 bf16 (520 bytes) are no TMA tensor map (strides are multiples of 16
    bytes): the consumers store with st.global, the reason recorded, the bits the same."""
    compiled, args = _wide(260)
    why = compiled.kernel.attrs["epilogue"]
    assert why.startswith("st.global: C rows of 520 bytes") and "multiple of 16" in why
    assert "cp.async.bulk.tensor.2d.global" not in compiled.ptx and "st.global" in compiled.ptx
    ts.check_against_reference(gemm_wide_c, *args, backend="target", target="sm_90a",
                               tile_shape=(128, 128, 64), grid=(2, 2))
    aligned, _ = _wide(264)  # 528 bytes: a legal pitch
    assert aligned.kernel.attrs["epilogue"] == "tma_store"


def test_tma_store_demanded_where_it_cannot_be_is_refused() -> None:
    with pytest.raises(UnsupportedError, match="multiple of 16 bytes") as err:
        _wide(260, {"tma_store": True})
    assert err.value.loc is not None and err.value.loc.file == __file__


@pytest.mark.parametrize("name, tile, config", [
    ("gemm_bf16", (128, 128, 64), {}),
    ("gemm_bf16", (128, 256, 64), {}),  # two consumers: bf16 pairs split between them
    ("gemm_f16", (128, 128, 64), {"num_warps": 12}),
    ("gemm", (128, 256, 64), {}),
])
def test_tma_store_false_keeps_st_global(name: str, tile: tuple[int, int, int],
                                         config: dict[str, Any]) -> None:
    config = {**config, "tma_store": False}
    compiled = compile_(name, 256, 512, 128, tile, config)
    assert compiled.kernel.attrs["epilogue"] == "st.global: tma_store=False"
    assert "cp.async.bulk.tensor.2d.global" not in compiled.ptx
    assert "stmatrix" not in compiled.ptx and "st.global" in compiled.ptx
    ts.check_against_reference(KERNELS[name], *arguments(name, 256, 512, 128),
                               backend="target", target="sm_90a", tile_shape=tile,
                               config=config)


# --------------------------------------------------------------------------- planted
_LINES = (ROOT / "tests" / "lower" / "sm90a" / "epilogue_kernels.py").read_text().splitlines()
_START = next(k for k, t in enumerate(_LINES) if "def gemm_bf16" in t)
STORE_LINE = 1 + next(k for k, t in enumerate(_LINES) if k > _START and "C[tile_m" in t)


def planted(edit: Any) -> tuple[Any, list[np.ndarray]]:
    """The 128x128 bf16 GEMM with ``edit`` applied to its consumer branch."""
    args = arguments("gemm_bf16", 256, 256, 128)
    compiled = ts.compile_kernel(kernels.gemm_bf16, *args, target="sm_90a",
                                 tile_shape=(128, 128, 64))
    edit(consumer(compiled.kernel))
    return compiled, args


def run(compiled: Any, args: list[np.ndarray]) -> None:
    targs, _ = target_arguments(compiled, args)
    run_target(compiled.kernel, targs)


def drop(block: Block, kind: type, keep: int | None = None) -> None:
    """Remove the instructions of ``kind`` below ``block`` (all but the ``keep``-th)."""
    seen = 0
    for instr in list(walk(block)):
        for region in instr.regions:
            drop(region.block, kind, keep)
    out = []
    for i in block.instrs:
        if isinstance(i.op, kind):
            seen += 1
            if keep is not None and seen - 1 == keep:
                out.append(i)
            continue
        out.append(i)
    block.instrs[:] = out


def test_planted_missing_proxy_fence() -> None:
    compiled, args = planted(lambda b: drop(b, Fence))
    with pytest.raises(IRVerifyError, match="TMA store reads shared memory written by"):
        check_kernel(compiled.kernel)
    with pytest.raises(TargetFault, match="missing proxy fence") as err:
        run(compiled, args)
    assert "tma_store" in err.value.op and err.value.loc.line == STORE_LINE


def test_planted_cta_exits_before_wait_group_read() -> None:
    compiled, args = planted(lambda b: drop(b, BulkWait))
    with pytest.raises(TargetFault, match="bulk store not waited") as err:
        run(compiled, args)
    assert "tma_store" in err.value.op and "wait_group.read" in err.value.message


def test_planted_uncommitted_group_is_never_waited() -> None:
    compiled, args = planted(lambda b: drop(b, BulkCommit))
    with pytest.raises(TargetFault, match="never committed"):
        run(compiled, args)


def test_planted_staging_overwritten_before_wait_group_read() -> None:
    """The staging tile written again after the TMA stores and before the wait (a
    second tile through the same buffer): reported at the stmatrix that overwrites."""
    def edit(block: Block) -> None:
        first = next(i for i in block.instrs if isinstance(i.op, Stmatrix))
        issue = next(i for i in block.instrs if isinstance(i.op, If) and any(
            isinstance(j.op, TmaStore) for j in walk(i.regions[0].block)))
        then = issue.regions[0].block
        then.instrs[:] = [i for i in then.instrs if not isinstance(i.op, BulkWait)]
        block.instrs.insert(block.instrs.index(issue) + 1,
                            Instr(first.op, list(first.operands), [], loc=first.loc))
    compiled, args = planted(edit)
    with pytest.raises(TargetFault, match="bulk store source overwritten") as err:
        run(compiled, args)
    assert "stmatrix" in err.value.op and "cp.async.bulk.wait_group.read" in err.value.message


def test_planted_missing_named_barrier_is_a_race() -> None:
    """Without the barrier after the fence, thread 0's TMA store reads the other
    consumer threads' stmatrix writes unordered."""
    compiled, args = planted(lambda b: drop(b, Bar, keep=0))
    with pytest.raises(TargetFault, match="shared memory race") as err:
        run(compiled, args)
    assert "tma_store" in err.value.op


def test_planted_in_ptx_text_exit_before_wait() -> None:
    """The same check on PTX text run by ts.ptx: the fault names the PTX store."""
    args = arguments("gemm_bf16", 128, 128, 128)
    compiled = ts.compile_kernel(kernels.gemm_bf16, *args, target="sm_90a",
                                 tile_shape=(128, 128, 64))
    text = compiled.ptx.replace("cp.async.bulk.wait_group.read 0;", "")
    targs, _ = target_arguments(compiled, args)
    values = [ts.ptx.tensor_map(a.array, a.box, a.swizzle, elem=a.elem)
              if hasattr(a, "tensor_map") else a for a in targs]
    k = ts.ptx.load(text).kernel(compiled.name)
    with pytest.raises(TargetFault, match="bulk store not waited") as err:
        k.run(grid=compiled.grid, block=compiled.block, args=values,
              shared_bytes=compiled.shared_bytes)
    assert "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group" in str(err.value)


def test_planted_named_barrier_of_the_wrong_size() -> None:
    """``bar.sync 1, 256`` where only the 128 consumer threads arrive hangs."""
    def edit(block: Block) -> None:
        for i in block.instrs:
            if isinstance(i.op, Bar):
                i.op = Bar(1, 256)
    compiled, args = planted(edit)
    with pytest.raises(BarrierDeadlock, match=r"bar\.sync 1, 256 never completes: 128 of 256 "
                                              r"threads arrived") as err:
        run(compiled, args)
    assert err.value.what == "deadlock"
