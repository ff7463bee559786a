"""Launch caches: remembered call specialisations (``frontend.kernel.memo``), shared root
contexts and shared access plans. Each must give the same results as a first call:
the new arrays and scalars are used, and a changed shape or constant specialises anew."""

from __future__ import annotations

import weakref

import numpy as np
import pytest

import tessera as ts
from tessera.interp.tile.context import frozen
from tessera.interp.tile.memory import access


def _saxpy(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32],
           alpha: ts.f32) -> ts.Tensor["n", ts.f32]:
    i = ts.tile.linear_id()
    if i < n:  # n: a dim symbol, bound by the compiler
        y[i] = alpha * x[i] + y[i]
    return y


def _scaled(x: ts.Tensor["n", ts.f32], out: ts.Tensor["n", ts.f32], k: int):
    i = ts.tile.linear_id()
    out[i] = x[i] * k


def test_a_repeated_call_uses_its_own_arrays_and_scalars() -> None:
    saxpy = ts.kernel(_saxpy)
    rng = np.random.default_rng(0)
    for alpha in (2.5, -1.0, 0.125):  # the same signature each time
        x = rng.standard_normal(50).astype(np.float32)
        y = rng.standard_normal(50).astype(np.float32)
        ref = np.float32(alpha) * x + y
        out = saxpy(x, y, alpha)
        assert out is y and np.array_equal(out, ref)
    assert len(saxpy.calls.recipes) == 1


def test_keywords_positions_shapes_and_constants_specialise_apart() -> None:
    scaled = ts.kernel(_scaled)
    x = np.arange(12, dtype=np.float32)
    for k in (2, 3):
        out = np.zeros_like(x)
        scaled(x, out, k)
        assert np.array_equal(out, x * k)
        out = np.zeros_like(x)
        scaled(x, out=out, k=k)
        assert np.array_equal(out, x * k)
    short = np.arange(5, dtype=np.float32)
    out = np.zeros_like(short)
    scaled(short, out, 3)
    assert np.array_equal(out, short * 3)
    assert len(scaled.calls.recipes) == 5  # 2 constants x 2 call forms, 1 new shape


def test_a_converted_argument_is_not_remembered() -> None:
    """A float64 array is converted to the f32 storage and written back after the
    launch: such calls run the whole preparation every time."""
    saxpy = ts.kernel(_saxpy)
    for _ in range(2):
        x = np.ones(8)
        y = np.full(8, 2.0)
        assert np.array_equal(saxpy(x, y, 3.0), np.full(8, 5.0))
        assert np.array_equal(y, np.full(8, 5.0))
    assert not saxpy.calls.recipes


def test_plans_are_shared_only_for_the_same_read_only_arrays() -> None:
    starts = frozen(np.arange(4, dtype=np.int64) * 8)
    plan = access.AccessPlan.of([starts], (8,), (), 1)
    assert access.AccessPlan.of([starts], (8,), (), 1) is plan
    copy = frozen(starts.copy())
    assert access.AccessPlan.of([copy], (8,), (), 1) is not plan
    writable = np.arange(4, dtype=np.int64) * 8
    assert access.AccessPlan.of([writable], (8,), (), 1) is not access.AccessPlan.of(
        [writable], (8,), (), 1
    )


def test_plans_at_plain_integers_equal_the_general_ones() -> None:
    """The short path for starts that are Python ints (a loop index) builds the plan the
    general path builds from the same starts as int64 scalars, and views the same
    elements."""
    arr = np.arange(2 * 3 * 8, dtype=np.float32).reshape(2, 3, 8)
    for starts, sizes, squeeze, nlead in [([1, 2, 3], (1, 1, 4), (0, 1), 1),
                                          ([0, 0, 0], (2, 3, 8), (), 0),
                                          ([1, 0, 5], (1, 3, 1), (2,), 2)]:
        short = access.AccessPlan(starts, sizes, squeeze, nlead)
        general = access.AccessPlan([np.int64(s) for s in starts], sizes, squeeze, nlead)
        for name in access.AccessPlan.__slots__:
            assert getattr(short, name) == getattr(general, name), name
        assert np.array_equal(short.view(arr), general.view(np.asfortranarray(arr)))


def _line(err: Exception) -> str:
    """The source line an error's message points at (``file:line:`` first)."""
    path, line = str(err).split(":")[:2]
    return open(path).read().splitlines()[int(line) - 1]


def _running_sum(x: ts.Tensor["N"], out: ts.Tensor[1, ts.f32]):
    s = 0.0
    for i in ts.tile.range(0, N):
        s = s * 0.5 + ts.tile.cast(x[i], ts.f32)
    out[0] = s


def _past_the_end(x: ts.Tensor["N", ts.f32], out: ts.Tensor[1, ts.f32]):
    s = 0.0
    for i in ts.tile.range(0, N + 1):
        s = s + x[i]  # OOB at i = N
    out[0] = s


def _running_sum_reference(x: np.ndarray) -> np.float32:
    s = np.float32(0)
    for v in x.astype(np.float32):
        s = np.float32(s * np.float32(0.5) + v)
    return s


def test_single_element_reads_of_read_only_tensors() -> None:
    """``x[i]`` at a loop index reads the element directly: the same float32 chain as
    NumPy for f32, bf16 and int32 tensors, in both schedules and modes; an index past
    the end is still reported by the view's bounds check."""
    import ml_dtypes

    kernel = ts.kernel(_running_sum)
    rng = np.random.default_rng(8)
    for x in (rng.standard_normal(300).astype(np.float32),
              rng.standard_normal(300).astype(ml_dtypes.bfloat16),
              rng.integers(-50, 50, 300).astype(np.int32)):
        want = _running_sum_reference(x)
        for mode in ("checked", "fast"):
            for schedule in ("sequential", "vectorized"):
                out = np.zeros(1, np.float32)
                kernel(x, out, grid=1, mode=mode, schedule=schedule)
                assert out[0] == want, (x.dtype, mode, schedule)
    with pytest.raises(ts.TesseraError, match="out of bounds") as info:
        ts.kernel(_past_the_end)(np.ones(8, np.float32), np.zeros(1, np.float32), grid=1)
    assert "OOB at i = N" in _line(info.value)


def test_a_dead_array_never_answers_for_a_new_one() -> None:
    """Entries hold weak references: once an array is gone, an array made later (which
    may get its id) is analysed afresh."""
    for step in range(1, 40):
        starts = frozen(np.arange(4, dtype=np.int64) * step)
        plan = access.AccessPlan.of([starts], (1,), (0,), 1)
        assert plan.coefs == [{0: step}]
        alive = weakref.ref(starts)
        del starts
        assert alive() is None  # freed by its count of references: no collection needed


def _rewrite(x: ts.Tensor["n", ts.f32]):
    t = x[0:n]  # n: a dim symbol
    for _k in ts.tile.range(0, 3):
        x[0:n] = t + 1.0


def _accumulate(x: ts.Tensor["n", ts.f32], y: ts.Tensor["n", ts.f32]):
    t = x[0:n]
    for _k in ts.tile.range(0, 3):
        y[0:n] = y[0:n] + t


def test_a_loop_reloads_only_what_the_kernel_writes(monkeypatch) -> None:
    """A large view loaded every trip is read again only when the kernel writes its
    tensor: the loads of read-only ``x`` after the first trip reuse its array, those of
    ``y`` (and of the rewritten ``x``) read memory each time."""
    from tessera.interp.tile.memory import globals as global_mem

    calls: list[str] = []
    original = global_mem.load

    def spy(st, ctx, loc, ref):  # type: ignore[no-untyped-def]
        calls.append(ref.mem.name)
        return original(st, ctx, loc, ref)
    monkeypatch.setattr(global_mem, "load", spy)
    n = 2048  # small loads are not remembered (nothing to save)
    x, y = np.ones(n, np.float32), np.zeros(n, np.float32)
    ts.kernel(_accumulate)(x, y, grid=1)
    assert y.tolist() == [3.0] * n
    assert calls.count("x") == 1 and calls.count("y") == 3
    calls.clear()
    x = np.zeros(n, np.float32)
    ts.kernel(_rewrite)(x, grid=1)
    assert x.tolist() == [3.0] * n and calls.count("x") == 3


def test_coordinate_results_are_remembered_only_for_read_only_operands() -> None:
    from tessera.interp.tile.fastpaths.memo import coordinate_memo

    calls: list[int] = []

    def times(a, b):  # type: ignore[no-untyped-def]
        calls.append(1)
        return a * b
    op = coordinate_memo(times)
    g = frozen(np.arange(4, dtype=np.int64))
    first = op(g, 64)
    assert op(g, 64) is first and not first.flags.writeable and len(calls) == 1
    assert op(g, 32).tolist() == [0, 32, 64, 96] and len(calls) == 2  # another scalar
    mutable = np.arange(4, dtype=np.int64)
    assert op(mutable, 64) is not op(mutable, 64)  # a writeable operand: every time
    for step in range(1, 30):  # a dead operand never answers for a new one
        fresh = frozen(np.full(4, step, dtype=np.int64))
        assert op(fresh, 2).tolist() == [2 * step] * 4
        alive = weakref.ref(fresh)
        del fresh
        assert alive() is None


def test_registers_are_released_after_their_last_use() -> None:
    """A tile value's slot is cleared after the last step that reads it: in the loop
    ``y[0:n] = y[0:n] + t`` both loaded tiles die at the store (which runs the fused
    add); memory views, scalars and yielded values are not released."""
    from tessera.interp.tile.fastpaths.fusion import fusions
    from tessera.interp.tile.live import last_uses

    kernel = ts.kernel(_accumulate)
    kernel(np.ones(8, np.float32), np.zeros(8, np.float32), grid=1)
    fn = kernel.last.functions[kernel.name]
    body = next(i for i in fn.body.instrs if i.regions).regions[0].block
    fused = fusions(body)
    kept = [i for i in body.instrs if not i.op.terminator and i not in fused.values()]
    dead = last_uses(body, kept, fused)
    released = {kept[j].op.name: sorted(str(v.type) for v in vs)
                for j, vs in enumerate(dead) if vs}
    assert released == {"tile.store": ["tensor<8xf32>", "tensor<8xf32>"]}
