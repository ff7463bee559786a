"""Generated int8 matmuls on tensor cores: a compiled program's int8 matmuls (their
tiles rounded up to the tensor cores' multiples, B copied K-major into shared memory,
:mod:`tessera.ir.transforms.to_tile.matmul`) lower to ``mma.sync`` m16n8k32
``.s32.s8.s8.s32`` on sm_80 and ``wgmma`` ``.s32.s8.s8`` on sm_90a wherever every sum
provably stays inside s32 (:mod:`tessera.lower.sm80.intmma`), give the graph
interpreter's bits (the exact sum saturated once) under ``backend="target"`` and
assemble with no advisory or spill; where a sum might leave s32, or the tiles are not
the tensor cores', the kernel keeps the per-thread sums and says why."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import tessera as ts
from tessera.ir.transforms.schedule import tile as schedule_tile
from tessera.lower.sm80.intmma import why_per_thread
from tests.frontend.graph.lowered.same import (
    TARGETS,
    assembles_clean,
    multiplies,
    same_on_target,
)

#: the integer tensor-core instruction each target's PTX holds
INSTR = {"sm_80": "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32",
         "sm_90a": ".s32.s8.s8 {"}


def matmul(x, w):  # type: ignore[no-untyped-def]
    return x @ w


def _ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(-128, 128, shape).astype(np.int8)


def _mlp_case():  # type: ignore[no-untyped-def]
    root = str(Path(__file__).resolve().parents[4])
    if root not in sys.path:
        sys.path.insert(0, root)
    from benchmarks.compilers import tessera_side

    name = "mlp_relu_int8"  # 256 x 512 x 1024, values over the whole int8 range
    return tessera_side.FUNCTIONS[name], tessera_side.arguments(name)


def _on_tensor_cores(fn, args: list[np.ndarray]) -> None:  # type: ignore[no-untyped-def]
    lowered = ts.jit(fn).lower(*args)
    for target in TARGETS:
        kernels = lowered.target(target).kernels
        assert kernels
        for kernel in kernels:
            assembles_clean(kernel)
            if not multiplies(kernel):
                continue  # split-K's combine adds the slices' partial sums
            assert INSTR[target] in kernel.ptx, (target, kernel.name)
            if target == "sm_90a":
                assert "wgmma.mma_async" in kernel.ptx


@pytest.mark.parametrize("shape", [(200, 300, 150), (100, 50, 70), (5, 70, 9)])
def test_int8_matmuls_take_tensor_cores_with_the_graph_bits(
        shape: tuple[int, int, int]) -> None:
    # 200 x 300 x 150: edge tiles along M, N and K (128 x 128 x 64 tiles); 100 x 50 x 70: one
    # tile rounded up along every loop (128 x 80 x 64, masked past the edges)
    m, k, n = shape
    rng = np.random.default_rng(m * k + n)
    args = [_ints(rng, (m, k)), _ints(rng, (k, n))]
    same_on_target(matmul, args)
    _on_tensor_cores(matmul, args)
    # the definition: the exact sum saturated once to int8
    want = np.clip(args[0].astype(np.int64) @ args[1].astype(np.int64), -128, 127)
    got = ts.jit(matmul).lower(*args).run(*args, backend="target", target="sm_80")
    assert np.array_equal(np.asarray(got.array), want.astype(np.int8))


def test_extreme_products_sum_on_tensor_cores() -> None:
    # every product 2^14 or -127 * 128 over K = 1000: sums of about +-2^24, far beyond
    # int8 (saturated once), far inside s32
    x = np.full((64, 1000), -128, np.int8)
    w = np.where(np.arange(1000 * 24).reshape(1000, 24) % 3, -128, 127).astype(np.int8)
    same_on_target(matmul, [x, w])
    _on_tensor_cores(matmul, [x, w])


def test_the_int8_mlp_takes_tensor_cores_with_the_graph_bits() -> None:
    fn, args = _mlp_case()
    same_on_target(fn, args)
    _on_tensor_cores(fn, args)


def test_sums_that_might_leave_s32_keep_the_per_thread_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # K = 2^17 - 1 products of up to 2^14 (the longest the tile level generates): the
    # K loop's 2048 steps of 64 may reach 2^31, so a kernel walking all of K sums per
    # thread; split-K's slices (the default for this small grid) are short enough
    rng = np.random.default_rng(5)
    k = 2**17 - 1
    args = [_ints(rng, (8, k)), _ints(rng, (k, 8))]
    split = ts.jit(matmul).lower(*args)
    assert [why_per_thread(kernel, "sm_80") for kernel in split.tile.kernels] == ["", ""]
    monkeypatch.setattr(schedule_tile, "_split", lambda *args: 1)
    lowered = ts.jit(lambda x, w: matmul(x, w)).lower(*args)
    for kernel in lowered.tile.module.functions.values():
        for target in TARGETS:
            assert why_per_thread(kernel, target) == \
                "sums of up to 2147483648 may leave s32 (2^31)"
    for target in TARGETS:
        for kernel in lowered.target(target).kernels:
            assert "mma.sync" not in kernel.ptx and "wgmma" not in kernel.ptx
    # a little shorter, every sum stays inside s32: tensor cores
    k = 2**17 - 2**7
    lowered = ts.jit(matmul).lower(_ints(rng, (8, k)), _ints(rng, (k, 8)))
    for kernel in lowered.tile.module.functions.values():
        assert why_per_thread(kernel, "sm_80") == why_per_thread(kernel, "sm_90a") == ""


def test_batched_int8_matmuls_keep_the_per_thread_path() -> None:
    # a batched matmul's operand tiles are reshaped from 1 x M x K: not the tensor
    # cores' 2-D shared tiles
    rng = np.random.default_rng(6)
    args = [_ints(rng, (2, 64, 32)), _ints(rng, (2, 32, 16))]
    lowered = ts.jit(matmul).lower(*args)
    for kernel in lowered.tile.module.functions.values():
        assert "K-major" in why_per_thread(kernel, "sm_80")
    same_on_target(matmul, args, "sm_80")
    for kernel in lowered.target("sm_80").kernels:
        assert "mma.sync" not in kernel.ptx
