"""Staged K loops (``cp_async`` into shared memory, barrier, ``mma``, barrier): checked
mode runs the first trip and derives the others
(:mod:`tessera.interp.tile.fastpaths.staged`); its bits, reports and the state it leaves
behind must be those of ``mode="reference"``, which runs every trip."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
import tessera.interp.tile.fastpaths.deferred as deferred
from tessera.interp.tile import fastpaths
from tests.tile.test_schedules import _report


@ts.kernel
def staged_f32(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
               C: ts.Tensor["M", "N", ts.f32]):
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def staged_bf16(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                C: ts.Tensor["M", "N", ts.f32]):
    """Copy groups committed and waited for, ``+=``, the operands' starts made before
    the loop."""
    sa = ts.tile.alloc_shared((BM, BK), ts.bf16)
    sb = ts.tile.alloc_shared((BK, BN), ts.bf16)
    acc = ts.tile.full((BM, BN), 0.25, ts.f32)
    m0 = tile_m
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(sb, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.cp_async(sa, A[m0:m0 + BM, k:k + BK])
        ts.tile.cp_commit_group()
        ts.tile.cp_wait_group(0)
        ts.tile.barrier()
        acc += ts.tile.mma(sa, sb)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def overlapping(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                C: ts.Tensor["M", "N", ts.f32]):
    """K windows that overlap (step BK / 2): trips are not end to end."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K - BK + 1, BK // 2):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def leftover(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
             C: ts.Tensor["M", "N", ts.f32], last: ts.Tensor["M", "BK", ts.f32]):
    """After the loop: the last trip's tile is still in shared memory, and a new copy
    is read after waiting for all but the newest copy group (planted bug: not waited)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    if tile_n == 0:
        last[tile_m:tile_m + BM, 0:BK] = smem_a
    ts.tile.cp_async(smem_b, B[0:BK, tile_n:tile_n + BN])
    ts.tile.cp_commit_group()
    ts.tile.cp_wait_group(1)
    C[tile_m:tile_m + BK, tile_n:tile_n + BN] = smem_b


@ts.kernel
def tail_read(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
              C: ts.Tensor["M", "N", ts.f32], last: ts.Tensor["M", "BK", ts.f32]):
    """After the loop, the last trip's tile is read back from shared memory."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc
    if tile_n == 0:
        last[tile_m:tile_m + BM, 0:BK] = smem_a


@ts.kernel
def in_place(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32]):
    """The kernel writes the tensor it stages from: loads copy, no derived trips."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    A[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


def _bits(arrays: Any) -> list[bytes]:
    return [np.ascontiguousarray(a).tobytes() for a in arrays]


def _record(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Wrap ``staged_loop`` where the deferred K loop calls it; the list gets each
    runner's answer (True: the trips after the first were derived; False: the general
    loop went on)."""
    runs: list[bool] = []
    original = deferred.staged_loop

    def spy(*args: Any) -> Any:
        runner = original(*args)
        if runner is None:
            return None
        return lambda *a: runs.append(runner(*a)) or runs[-1]
    monkeypatch.setattr(deferred, "staged_loop", spy)
    return runs


def _fresh(kernel: Any) -> Any:
    """A new kernel object from the same function (nothing compiled is shared)."""
    return ts.kernel(kernel.fn)


def _both(kernel: Any, make: Any, **launch: Any) -> tuple[list[np.ndarray], list[np.ndarray]]:
    ref, chk = make(), make()
    kernel(*ref, mode="reference", **launch)
    kernel(*chk, mode="checked", **launch)
    return ref, chk


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([(16, 16, 8), (32, 16, 16), (16, 32, 4)]), st.integers(1, 3),
       st.integers(1, 3), st.integers(2, 5), st.sampled_from(["auto", "sequential"]),
       st.integers(0, 2**31 - 1))
def test_derived_trips_give_the_reference_bits(tile: tuple[int, int, int], gm: int, gn: int,
                                               gk: int, schedule: str, seed: int) -> None:
    bm, bn, bk = tile
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((gm * bm, gk * bk)).astype(np.float32)
    b = rng.standard_normal((gk * bk, gn * bn)).astype(np.float32)
    with pytest.MonkeyPatch.context() as mp:
        runs = _record(mp)
        kernel = _fresh(staged_f32)
        ref, chk = _both(kernel, lambda: (a, b, np.zeros((gm * bm, gn * bn), np.float32)),
                         tile_shape=tile, schedule=schedule)
    assert runs and all(runs)  # every group (sequential) or launch derived its trips
    assert _bits(ref) == _bits(chk)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert np.allclose(chk[2], exact, rtol=1e-5, atol=1e-5)


def test_commits_waits_and_bf16_stages(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((48, 96)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((96, 32)).astype(ml_dtypes.bfloat16)
    runs = _record(monkeypatch)
    ref, chk = _both(_fresh(staged_bf16), lambda: (a, b, np.zeros((48, 32), np.float32)),
                     tile_shape=(16, 16, 16))
    assert runs == [True]
    assert _bits(ref) == _bits(chk)
    fast = np.zeros((48, 32), np.float32)
    staged_bf16(a, b, fast, tile_shape=(16, 16, 16), mode="fast")
    assert runs == [True, True]
    assert np.allclose(fast, chk[2], rtol=1e-5, atol=1e-5)


def test_overlapping_windows_take_one_view_per_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    runs = _record(monkeypatch)
    ref, chk = _both(_fresh(overlapping), lambda: (a, b, np.zeros((32, 32), np.float32)),
                     tile_shape=(16, 16, 16))
    assert runs == [True]
    assert _bits(ref) == _bits(chk)


def test_flushes_of_the_kept_k_columns_keep_the_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """With room for two trips of K only, the derived trips are kept one by one and
    the accumulator flushes on the way, as in the general loop."""
    from tessera.interp.tile.fastpaths.pending import PendingMma

    monkeypatch.setattr(PendingMma, "MAX_K", 32)
    rng = np.random.default_rng(10)
    a = rng.standard_normal((32, 96)).astype(np.float32)
    b = rng.standard_normal((96, 32)).astype(np.float32)
    runs = _record(monkeypatch)
    ref, chk = _both(_fresh(staged_f32), lambda: (a, b, np.zeros((32, 32), np.float32)),
                     tile_shape=(16, 16, 16))
    assert runs == [True]
    assert _bits(ref) == _bits(chk)


def test_state_after_the_loop_is_the_references(monkeypatch: pytest.MonkeyPatch) -> None:
    """The last trip's tile stays in shared memory, and the copy-group counters are
    where every trip would have left them: a later ``cp_wait_group(1)`` leaves the
    newest copy pending, which the next read reports, in both modes alike."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    runs = _record(monkeypatch)

    def make() -> tuple[np.ndarray, ...]:
        return a, b, np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32)
    kernel = _fresh(leftover)
    ref = _report(kernel, make(), mode="reference", grid=(2, 2), tile_shape=(16, 16, 16))
    chk = _report(kernel, make(), mode="checked", grid=(2, 2), tile_shape=(16, 16, 16))
    assert runs and all(runs)
    assert ref is not None and ref[0] == "async copy not waited" and ref == chk


def test_shared_memory_and_counters_after_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Group by group (the reference's schedule), the launch state at the end is the
    same: barrier epochs, copy-group counters, and each buffer's contents and shadows;
    and the tile read back after the loop is the last trip's."""
    from tessera.interp.tile import launcher

    rng = np.random.default_rng(9)
    a = rng.standard_normal((32, 64)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    states: list[Any] = []
    original = launcher.State

    def spy(*args: Any, **kwargs: Any) -> Any:
        states.append(original(*args, **kwargs))
        return states[-1]
    monkeypatch.setattr(launcher, "State", spy)
    runs = _record(monkeypatch)

    def make() -> tuple[np.ndarray, ...]:
        return a, b, np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32)
    ref, chk = _both(_fresh(tail_read), make, grid=(2, 2), tile_shape=(16, 16, 16),
                     schedule="sequential")
    assert runs == [True, True, True, True]  # one per group
    assert _bits(ref) == _bits(chk)
    assert np.array_equal(chk[3], a[:, 48:])
    one, two = states

    def summary(s: Any) -> list[Any]:
        out = [s.epoch.tolist(), s.open_id.tolist(), s.open_used.tolist(),
               s.done_upto.tolist()]
        for mem in s.shared:
            out += [mem.data.arr.tobytes(), mem.data.arr.shape, mem.data.exported, mem.init,
                    mem.tag, mem.writer, mem.reader, mem.wrote, mem.read]
        return out
    assert summary(one) == summary(two)
    # all groups at once: the same state as the general loop's, trip by trip
    tail_read(*make(), grid=(2, 2), tile_shape=(16, 16, 16))
    with fastpaths.disabled("staged_loop"):
        _fresh(tail_read)(*make(), grid=(2, 2), tile_shape=(16, 16, 16))
    assert runs[4:] == [True]
    assert summary(states[2]) == summary(states[3])


def test_a_later_trip_out_of_bounds_is_reported_at_its_trip(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """K = 40 with BK = 16: the third trip's views leave A and B. The runner declines
    after the first trip and the general loop reports the third, as the reference."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((32, 40)).astype(np.float32)
    b = rng.standard_normal((40, 32)).astype(np.float32)
    runs = _record(monkeypatch)

    def make() -> tuple[np.ndarray, ...]:
        return a, b, np.zeros((32, 32), np.float32)
    kernel = _fresh(staged_f32)
    ref = _report(kernel, make(), mode="reference", tile_shape=(16, 16, 16))
    chk = _report(kernel, make(), mode="checked", tile_shape=(16, 16, 16))
    assert runs and not any(runs)  # the vectorised run, then group 0 to name the bug
    assert ref is not None and ref[0] == "out of bounds" and ref == chk


def test_declines_sources_the_kernel_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A staged tensor the kernel also writes (here: a race between groups) keeps the
    general loop, which reports what the reference reports; one group alone is clean."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((32, 32)).astype(np.float32)
    b = rng.standard_normal((32, 32)).astype(np.float32)
    runs = _record(monkeypatch)
    kernel = _fresh(in_place)
    ref = _report(kernel, (a.copy(), b), mode="reference", tile_shape=(16, 16, 16))
    chk = _report(kernel, (a.copy(), b), mode="checked", tile_shape=(16, 16, 16))
    assert ref is not None and ref[0] == "race" and ref == chk
    ref, chk = _both(kernel, lambda: (a[:16, :16].copy(), b[:16, :16]),
                     tile_shape=(16, 16, 8))
    assert runs and not any(runs)
    assert _bits(ref) == _bits(chk)


def test_declines_a_strided_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    """A transposed view passed as A is not C-contiguous: the trips run one by one."""
    rng = np.random.default_rng(8)
    at = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    runs = _record(monkeypatch)
    ref, chk = _both(_fresh(staged_f32), lambda: (at.T, b, np.zeros((32, 32), np.float32)),
                     tile_shape=(16, 16, 16))
    assert runs == [False]
    assert _bits(ref) == _bits(chk)


def test_one_trip_and_other_loops_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.tile.test_simulator import gemm_f32

    runs = _record(monkeypatch)
    a = np.ones((16, 16), np.float32)
    c = np.zeros((16, 16), np.float32)
    _fresh(staged_f32)(a, a, c, tile_shape=(16, 16, 16))  # a single trip
    assert runs == [False] and (c == 16).all()
    _fresh(gemm_f32)(a, a, c, tile_shape=(16, 16, 8))  # no shared-memory stages
    assert runs == [False]


@pytest.mark.parametrize("start", [0.0, -0.0, 1.5, np.inf, np.nan])
def test_a_uniform_accumulator_start_adds_as_a_scalar(start: float) -> None:
    """The deferred product plus a K loop's ``full`` start: the same float64 sums as
    the broadcast add, signed zeros and NaN payloads included (a NaN start takes the
    broadcast add itself)."""
    from tessera.interp.tile.mma import _accumulate

    rng = np.random.default_rng(11)
    r = rng.standard_normal((2, 3, 8, 8))
    r[0, 0, 0, :4] = [-0.0, 0.0, np.nan, -np.inf]
    r[0, 0, 1, 0] = np.frombuffer(np.uint64(0x7FF0000000000123).tobytes())[0]  # a payload
    c = np.full((8, 8), start, np.float32)
    got, want = r.copy(), r.copy()
    with np.errstate(invalid="ignore"):  # the signalling NaN (launches ignore it too)
        _accumulate(got, c)
        np.add(want, c, out=want, casting="unsafe")
    assert got.view(np.uint64).tobytes() == want.view(np.uint64).tobytes()
