"""The first trip of a staged K loop repeated from the launch before
(:mod:`tessera.interp.tile.fastpaths.first`): its bits, reports and the state it leaves
behind must be those of ``mode="reference"``, which runs every trip."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera.interp.tile import fastpaths
from tessera.interp.tile.fastpaths import REGISTRY
from tests.tile.test_schedules import _report
from tests.tile.test_staged_loop import staged_f32, tail_read


@ts.kernel
def shifted(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
            C: ts.Tensor["R", "N", ts.f32], off: ts.int32):
    """The A tile starts ``off`` rows down: a loop-invariant start that is a runtime
    scalar (one compiled program for every value)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    m0 = tile_m + off
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[m0:m0 + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def shifted_inside(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                   C: ts.Tensor["R", "N", ts.f32], off: ts.int32):
    """The same start computed inside the loop from a value from outside it."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        m0 = tile_m + off
        ts.tile.cp_async(smem_a, A[m0:m0 + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def prefetched(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
               C: ts.Tensor["M", "N", ts.f32], early: ts.int32):
    """With ``early`` set, a copy into the A buffer is still pending when the loop
    starts (planted bug: its first copy overwrites it unwaited)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f32)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f32)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    if early != 0:
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, 0:BK])
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


def _fresh(kernel: Any) -> Any:
    return ts.kernel(kernel.fn)


def _taken() -> int:
    fastpaths.load()
    return REGISTRY["staged_first_trip"].taken


def _pair(rng: np.random.Generator, m: int, k: int, n: int) -> tuple[np.ndarray, ...]:
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32), np.zeros((m, n), np.float32))


def test_repeated_launches_give_the_reference_bits() -> None:
    """New data of the same shapes: the first trip is repeated from the launch before,
    and every launch's bits are the reference's; a new shape is run step by step."""
    rng = np.random.default_rng(1)
    kernel = _fresh(staged_f32)
    for shape, repeated in [((48, 64, 32), False), ((48, 64, 32), True),
                            ((48, 64, 32), True), ((32, 96, 48), False),
                            ((32, 96, 48), True)]:
        args = _pair(rng, *shape)
        args[0][0, :5] = [-0.0, np.inf, np.nan, 1e-40, -3.0]  # specials stay exact
        ref = [x.copy() for x in args]
        kernel(*ref, mode="reference", tile_shape=(16, 16, 16))
        before = _taken()
        kernel(*args, tile_shape=(16, 16, 16))
        assert (_taken() > before) == repeated, shape
        assert args[2].tobytes() == ref[2].tobytes()


@settings(max_examples=10, deadline=None)
@given(st.sampled_from([(16, 16, 8), (32, 16, 16), (16, 32, 4)]), st.integers(1, 3),
       st.integers(1, 3), st.integers(2, 5), st.sampled_from(["checked", "fast"]),
       st.integers(0, 2**31 - 1))
def test_drawn_shapes_repeat_with_the_reference_bits(tile: tuple[int, int, int], gm: int,
                                                     gn: int, gk: int, mode: str,
                                                     seed: int) -> None:
    """Three launches of one drawn shape: the later two repeat the first's trips, and
    every result has the reference's bits (fast mode: close to them)."""
    bm, bn, bk = tile
    rng = np.random.default_rng(seed)
    kernel = _fresh(staged_f32)
    before = _taken()
    for _ in range(3):
        args = _pair(rng, gm * bm, gk * bk, gn * bn)
        ref = [x.copy() for x in args]
        kernel(*ref, mode="reference", tile_shape=tile)
        kernel(*args, mode=mode, tile_shape=tile)
        if mode == "checked":
            assert args[2].tobytes() == ref[2].tobytes()
        else:
            assert np.allclose(args[2], ref[2], rtol=1e-5, atol=1e-5)
    assert _taken() == before + 2


def test_views_of_larger_arrays_and_read_only_parameters() -> None:
    """Parameters that are views into larger buffers, read-only ones among them: the
    rebuilt views lie at the remembered offsets of the new arrays."""
    rng = np.random.default_rng(2)
    kernel = _fresh(staged_f32)
    for _ in range(3):
        big = rng.standard_normal((64, 64)).astype(np.float32)
        a = big[16:48]  # C-contiguous rows of a larger array
        b = rng.standard_normal((64, 32)).astype(np.float32)
        b.flags.writeable = False
        c, ref = np.zeros((32, 32), np.float32), np.zeros((32, 32), np.float32)
        kernel(a, b, ref, mode="reference", tile_shape=(16, 16, 16))
        kernel(a, b, c, tile_shape=(16, 16, 16))
        assert c.tobytes() == ref.tobytes()


@pytest.mark.parametrize("kernel", [shifted, shifted_inside])
def test_another_invariant_start_is_run_step_by_step(kernel: Any) -> None:
    rng = np.random.default_rng(3)
    a, b, _ = _pair(rng, 64, 48, 32)
    kernel = _fresh(kernel)
    for off, repeated in [(0, False), (0, True), (16, False), (16, True), (0, False)]:
        c, ref = np.zeros((32, 32), np.float32), np.zeros((32, 32), np.float32)
        kernel(a, b, ref, off, mode="reference", grid=(2, 2), tile_shape=(16, 16, 16))
        before = _taken()
        kernel(a, b, c, off, grid=(2, 2), tile_shape=(16, 16, 16))
        assert (_taken() > before) == repeated, off
        assert c.tobytes() == ref.tobytes()
        assert np.allclose(c, a[off:off + 32].astype(np.float64) @ b, atol=1e-4)


def test_a_pending_copy_before_the_loop_is_reported_as_the_reference() -> None:
    """A clean launch remembers the first trip; the next one starts the loop with a
    copy pending in a staged buffer, so it runs the first trip step by step, which
    reports the unwaited overwrite as the reference does."""
    rng = np.random.default_rng(4)
    a, b, _ = _pair(rng, 32, 64, 32)
    kernel = _fresh(prefetched)

    def make(early: int) -> tuple[Any, ...]:
        return a, b, np.zeros((32, 32), np.float32), early
    assert _report(kernel, make(0), tile_shape=(16, 16, 16)) is None
    before = _taken()
    chk = _report(kernel, make(1), tile_shape=(16, 16, 16))
    ref = _report(kernel, make(1), mode="reference", tile_shape=(16, 16, 16))
    assert _taken() == before
    assert ref is not None and ref[0] == "async copy not waited" and ref == chk


def test_bounds_are_tested_at_the_first_trip_too() -> None:
    """A shape the launch before did not have is never repeated; a K that leaves the
    parameters is reported at its trip, as the reference does."""
    rng = np.random.default_rng(5)
    kernel = _fresh(staged_f32)
    kernel(*_pair(rng, 32, 48, 32), tile_shape=(16, 16, 16))
    a, b, _ = _pair(rng, 32, 40, 32)

    def make() -> tuple[Any, ...]:
        return a, b, np.zeros((32, 32), np.float32)
    ref = _report(kernel, make(), mode="reference", tile_shape=(16, 16, 16))
    chk = _report(kernel, make(), tile_shape=(16, 16, 16))
    assert ref is not None and ref[0] == "out of bounds" and ref == chk


@pytest.mark.parametrize("mode", ["checked", "fast"])
def test_state_after_a_repeated_first_trip(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Barrier epochs, copy-group counters, each buffer's contents and shadows, and the
    tile read back after the loop: the same as when every trip runs step by step."""
    from tessera.interp.tile import launcher

    rng = np.random.default_rng(6)
    a, b, _ = _pair(rng, 32, 64, 32)
    states: list[Any] = []
    original = launcher.State

    def spy(*args: Any, **kwargs: Any) -> Any:
        states.append(original(*args, **kwargs))
        return states[-1]
    monkeypatch.setattr(launcher, "State", spy)

    def make() -> tuple[np.ndarray, ...]:
        return a, b, np.zeros((32, 32), np.float32), np.zeros((32, 16), np.float32)
    kernel = _fresh(tail_read)
    kernel(*make(), grid=(2, 2), tile_shape=(16, 16, 16), mode=mode)
    before = _taken()
    got = make()
    kernel(*got, grid=(2, 2), tile_shape=(16, 16, 16), mode=mode)
    assert _taken() == before + 1
    with fastpaths.disabled("staged_loop"):
        want = make()
        _fresh(tail_read)(*want, grid=(2, 2), tile_shape=(16, 16, 16), mode=mode)
    assert [x.tobytes() for x in got] == [x.tobytes() for x in want]
    assert np.array_equal(got[3], a[:, 48:])

    def summary(s: Any) -> list[Any]:
        out = [s.epoch.tolist(), s.open_id.tolist(), s.open_used.tolist(),
               s.done_upto.tolist()]
        for mem in s.shared:
            out += [mem.data.arr.tobytes(), mem.data.arr.shape, mem.data.exported, mem.init,
                    mem.tag, mem.writer, mem.reader, mem.wrote, mem.read]
        return out
    assert summary(states[1]) == summary(states[2])
