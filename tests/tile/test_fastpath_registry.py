"""The registry of the tile simulator's fast paths: every registered fast path states
its proof of equivalence with the reference rules, and every one is taken by a kernel
here whose bits are the same with it on, with it switched off and in
``mode="reference"``."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

import tessera as ts
from tessera.interp.tile import fastpaths
from tests.tile.fastpaths import block_reduction
from tests.tile.test_seeds import example
from tests.tile.test_staged_loop import staged_f32


@ts.kernel
def loops(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    s = x[i] * 0.0
    for k in ts.tile.range(0, i + 1):  # a trip count per tile
        s += x[k]
    for _k in ts.tile.range(0, 3):  # the same trips in every tile
        s = s * 0.5
    if i % 2 == 0:  # a branch on coordinates
        s = s + 1.0
    out[i] = s + x[i]  # the last statement, a store of a sum


@ts.kernel
def gemm(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
         C: ts.Tensor["M", "N", ts.f32]):
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        acc = ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN], acc)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def gemm_plus(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
              C: ts.Tensor["M", "N", ts.f32]):
    acc = ts.tile.full((BM, BN), 0.5, ts.f32)
    for k in ts.tile.range(0, K, BK):
        acc += ts.tile.mma(A[tile_m:tile_m + BM, k:k + BK], B[k:k + BK, tile_n:tile_n + BN])
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def reloads(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]):
    t = x[0:n]
    for _k in ts.tile.range(0, 3):  # the same view of read-only x loaded every trip
        y[0:n] = y[0:n] + t


def run_loops(mode: str) -> bytes:
    x = np.random.default_rng(1).standard_normal(48).astype(np.float32)
    out = np.zeros_like(x)
    loops(x, out, grid=6, group_size=8, mode=mode)
    return out.tobytes()


def run_reduction(mode: str) -> bytes:
    data = np.random.default_rng(2).standard_normal(5000).astype(np.float32)
    total = np.zeros(1, np.float32)
    block_reduction()(data, total, grid=3, group_size=64, mode=mode)
    return total.tobytes()


def run_gemm(mode: str, kernel: Callable[..., None] = gemm) -> bytes:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((32, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((64, 32)).astype(ml_dtypes.bfloat16)
    c = np.zeros((32, 32), np.float32)
    kernel(a, b, c, tile_shape=(16, 16, 16), mode=mode)
    return c.tobytes()


def run_staged(mode: str) -> bytes:
    rng = np.random.default_rng(6)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    c = np.zeros((32, 32), np.float32)
    staged_f32(a, b, c, tile_shape=(16, 16, 16), mode=mode)
    return c.tobytes()


def run_staged_twice(mode: str) -> bytes:
    """Two launches of one shape: the second repeats the first's first trip."""
    rng = np.random.default_rng(7)
    out = b""
    for _ in range(2):
        a = rng.standard_normal((32, 64)).astype(np.float32)
        b = rng.standard_normal((64, 32)).astype(np.float32)
        c = np.zeros((32, 32), np.float32)
        staged_f32(a, b, c, tile_shape=(16, 16, 16), mode=mode)
        out += c.tobytes()
    return out


def run_gemm_plus(mode: str) -> bytes:
    return run_gemm(mode, gemm_plus)


def run_reloads(mode: str) -> bytes:
    x = np.random.default_rng(5).standard_normal(2048).astype(np.float32)
    y = np.ones_like(x)
    reloads(x, y, grid=1, mode=mode)
    return y.tobytes()


def run_attention(mode: str) -> bytes:
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 128, 32)).astype(ml_dtypes.bfloat16) for _ in range(3))
    return np.asarray(example("flash_attention").flash_attention(
        q, k, v, is_causal=True, mode=mode)).tobytes()


#: fast path -> a launch that takes it (returning its result's bits)
CASES: dict[str, Callable[[str], bytes]] = {
    "counted_loops": run_loops, "branch_memo": run_loops, "coordinate_memo": run_loops,
    "fused_store": run_loops, "last_store": run_loops,
    "strided_sum": run_reduction, "tree_sum": run_reduction, "quiet_accesses": run_reduction,
    "deferred_mma": run_gemm, "fused_mma_add": run_gemm_plus,
    "fused_mma_scale": run_attention, "kept_loads": run_reloads, "staged_loop": run_staged,
    "staged_first_trip": run_staged_twice,
}


def test_every_fast_path_has_a_proof_and_a_case() -> None:
    registry = fastpaths.load()
    assert set(registry) == set(CASES)
    for path in registry.values():
        assert "Proof" in path.proof and len(path.proof) > 200, path.name


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_fast_path_keeps_the_reference_bits(name: str) -> None:
    run = CASES[name]
    path = fastpaths.path(name)
    want = run("reference")
    before = path.taken
    with fastpaths.only(name):  # compiled anew: the programs are cached per switch state
        alone = run("checked")
    assert path.taken > before, f"{name} was not taken"
    before = path.taken
    with fastpaths.disabled(name):
        without = run("checked")
    assert path.taken == before, f"{name} was taken while switched off"
    assert alone == want and without == want and run("checked") == want


def test_switches_nest_and_restore() -> None:
    everything = fastpaths.enabled()
    with fastpaths.disabled("tree_sum"):
        assert "tree_sum" not in fastpaths.enabled()
        with fastpaths.only("tree_sum"):
            assert fastpaths.enabled() == {"tree_sum"}
        assert fastpaths.off() == {"tree_sum"}
    assert fastpaths.enabled() == everything and not fastpaths.off()
    with pytest.raises(ts.ArgumentError, match="registered: "):
        with fastpaths.disabled("no_such_path"):
            pass
