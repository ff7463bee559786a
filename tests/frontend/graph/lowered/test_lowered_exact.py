"""Graph programs whose kernels accumulate exactly, lowered to Target IR and PTX: sums,
means (over rows, columns or a middle axis), variance, layernorm and RMSnorm give the
graph interpreter's bits under the Target IR interpreter (``backend="target"``) on both
targets, their PTX assembles with no advisory and no spills, and so do matmuls with
their epilogues (the exact mma); what is still refused names the graph line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tessera.frontend.graph.lowered_target import TargetGenerationError
from tests.frontend.graph.lowered.same import TARGETS, assembles_clean, same_on_target

FORMATS = {"f32": ts.f32, "bf16": ts.bf16, "f16": ts.f16}
#: the exponents a format's values span, subnormals included
SPANS = {"f32": (-152, 126), "bf16": (-136, 126), "f16": (-26, 15)}


def row_sum(x):  # type: ignore[no-untyped-def]
    return op.sum(x, axis=-1)


def row_mean(x):  # type: ignore[no-untyped-def]
    return op.mean(x, axis=-1)


def variance(x):  # type: ignore[no-untyped-def]
    m = op.mean(x, axis=-1, keepdims=True)
    return op.mean((x - m) * (x - m), axis=-1)


def layernorm(x, g, b):  # type: ignore[no-untyped-def]
    mu = op.mean(x, axis=-1, keepdims=True)
    d = x - mu
    return d / op.sqrt(op.mean(d * d, axis=-1, keepdims=True) + 1e-5) * g + b


def rmsnorm(x, g):  # type: ignore[no-untyped-def]
    return x / op.sqrt(op.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


def column_sum_added(x):  # type: ignore[no-untyped-def]
    return op.sum(x, axis=0, keepdims=True) + x


def column_mean(x):  # type: ignore[no-untyped-def]
    return op.mean(x, axis=0)


def column_centred(x):  # type: ignore[no-untyped-def]
    return x - op.mean(x, axis=0, keepdims=True)


def matmul(a, b):  # type: ignore[no-untyped-def]
    return a @ b


def _as(fmt: str, x: np.ndarray) -> np.ndarray:
    return ts.Tensor(np.asarray(x, np.float64), FORMATS[fmt]).array  # rounded once (RNE)


def _values(rng: np.random.Generator, shape: tuple[int, ...], fmt: str, kind: str,
            ) -> np.ndarray:
    """Values of ``kind``: ``normal``; ``wide`` (magnitudes over the whole format);
    ``cancel`` (each row's values and their negatives, plus one tiny value: the sum is
    that value); ``special`` (wide, with NaN, infinities and signed zeros planted)."""
    lo, hi = SPANS[fmt]
    if kind == "normal":
        return _as(fmt, rng.standard_normal(shape) * 3)
    x = rng.standard_normal(shape) * 2.0 ** rng.integers(lo, hi, shape)
    if kind == "cancel":
        half = shape[-1] // 2
        x[..., half:2 * half] = -x[..., :half][..., ::-1]
        x[..., -1] = 2.0 ** lo
    if kind == "special":
        flat = x.reshape(-1)
        for v in (np.nan, np.inf, -np.inf, 0.0, -0.0):
            flat[rng.integers(0, flat.size, 1 + flat.size // 40)] = v
    return _as(fmt, x)


side = st.integers(1, 40)
kinds = st.sampled_from(["normal", "wide", "cancel", "special"])


@settings(max_examples=20, deadline=None)
@given(rows=side, cols=st.integers(1, 90), fmt=st.sampled_from(sorted(FORMATS)), kind=kinds,
       fn=st.sampled_from([row_sum, row_mean, variance]), target=st.sampled_from(TARGETS),
       seed=st.integers(0, 2**16))
def test_sums_means_and_variance_on_target_give_the_graph_bits(
        rows: int, cols: int, fmt: str, kind: str, fn, target: str,  # type: ignore[no-untyped-def]
        seed: int) -> None:
    rng = np.random.default_rng(seed)
    same_on_target(fn, (_values(rng, (rows, cols), fmt, kind),), target)


@settings(max_examples=12, deadline=None)
@given(rows=side, cols=st.integers(2, 130), fmt=st.sampled_from(sorted(FORMATS)),
       kind=kinds, norm=st.sampled_from(["layernorm", "rmsnorm"]),
       target=st.sampled_from(TARGETS), seed=st.integers(0, 2**16))
def test_norms_on_target_give_the_graph_bits(rows: int, cols: int, fmt: str, kind: str,
                                             norm: str, target: str, seed: int) -> None:
    # (rows of one element put the scale vector in the row-statistic layout, into which
    # a memory tile is not broadcast yet: refused)
    rng = np.random.default_rng(seed)
    x = _values(rng, (rows, cols), fmt, kind)
    g, b = (_as(fmt, rng.standard_normal(cols)) for _ in range(2))
    if norm == "layernorm":
        same_on_target(layernorm, (x, g, b), target)
    else:
        same_on_target(rmsnorm, (x, g), target)


@settings(max_examples=20, deadline=None)
@given(rows=side, cols=st.integers(1, 90), fmt=st.sampled_from(sorted(FORMATS)), kind=kinds,
       fn=st.sampled_from([column_sum_added, column_mean, column_centred]),
       target=st.sampled_from(TARGETS), seed=st.integers(0, 2**16))
def test_column_sums_and_means_on_target_give_the_graph_bits(
        rows: int, cols: int, fmt: str, kind: str, fn, target: str,  # type: ignore[no-untyped-def]
        seed: int) -> None:
    """One accumulator per column; the values are drawn per column (the transpose of
    rows), so ``cancel`` cancels down each column."""
    rng = np.random.default_rng(seed)
    x = np.ascontiguousarray(_values(rng, (cols, rows), fmt, kind).T)
    same_on_target(fn, (x,), target)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_column_sum_is_exact_and_rounded_once(fmt: str) -> None:
    """The columns of ``[[2^10, 1, 1], [t, t, u/2], [-2^10, -1, u/2]]`` (``t = 2^-24``,
    f16's smallest subnormal, a value of every format; ``u`` the format's spacing at 1)
    sum to ``t``, ``t`` and ``1 + u``, where a running sum in the format gives 0, 0 and
    1 (``1 + u/2`` is a tie, rounded to the even 1)."""
    t, u = 2.0**-24, {"f32": 2.0**-23, "bf16": 2.0**-7, "f16": 2.0**-10}[fmt]
    x = _as(fmt, [[2.0**10, 1.0, 1.0], [t, t, u / 2], [-(2.0**10), -1.0, u / 2]])
    want = _as(fmt, [[t, t, 1 + u]])
    assert want.tobytes() != _as(fmt, [[0.0, 0.0, 1.0]]).tobytes()
    lowered = ts.jit(lambda x: op.sum(x, axis=0, keepdims=True)).lower(x)
    for target in TARGETS:
        out = np.asarray(lowered.run(x, backend="target", target=target).array)
        assert out.tobytes() == want.tobytes(), (target, out, want)


@pytest.mark.parametrize("shape", [(1,), (37,), (3, 4, 5), (2, 1, 7)])
def test_reductions_of_other_ranks_on_target(shape: tuple[int, ...]) -> None:
    """A 1-D row (one scalar result) and rows of 3-D tensors."""
    rng = np.random.default_rng(len(shape))
    x = _values(rng, shape, "f32", "wide")
    for fn in (row_sum, row_mean):
        for target in TARGETS:
            same_on_target(fn, (x,), target)


@pytest.mark.parametrize("shape, axis", [((3, 4, 5), 0), ((3, 4, 5), 1), ((2, 1, 7), 1),
                                         ((5, 3, 1), 1), ((4, 2, 6), -2)])
def test_sums_over_leading_and_middle_axes_on_target(shape: tuple[int, ...], axis: int
                                                     ) -> None:
    """An accumulator per (leading index, trailing index) pair: element ``k`` goes to
    accumulator ``(k // (n inner)) inner + k % inner``."""
    rng = np.random.default_rng(sum(shape) + axis)
    x = _values(rng, shape, "f32", "special")

    def summed(x):  # type: ignore[no-untyped-def]
        return op.sum(x, axis=axis, keepdims=True) * x

    def mean(x):  # type: ignore[no-untyped-def]
        return op.mean(x, axis=axis)

    for fn in (summed, mean):
        for target in TARGETS:
            same_on_target(fn, (x,), target)


def test_long_rows_and_many_rows_on_target() -> None:
    """Rows longer than one warp's 32 chunks and tiles of several row blocks (edge
    tiles masked)."""
    rng = np.random.default_rng(5)
    same_on_target(row_mean, (_values(rng, (3, 1000), "f32", "wide"),), "sm_80")
    same_on_target(variance, (_values(rng, (300, 37), "f32", "cancel"),), "sm_90a")


@pytest.mark.parametrize("target", TARGETS)
def test_exact_reduction_ptx_assembles_without_advisories_or_spills(target: str) -> None:
    rng = np.random.default_rng(1)
    cases = [(layernorm, [(33, 100), (100,), (100,)]), (rmsnorm, [(7, 48), (48,)]),
             (row_mean, [(300, 37)]), (variance, [(64, 1024)]),
             (layernorm, [(512, 768), (768,), (768,)]), (column_sum_added, [(300, 37)]),
             (column_centred, [(64, 1024)])]
    for fn, shapes in cases:
        args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        for kernel in ts.jit(fn).lower(*args).target(target).kernels:
            assembles_clean(kernel)
            assert "red.shared.add.u64" in kernel.ptx


def linear(x, w, b):  # type: ignore[no-untyped-def]
    return op.relu(x @ w + b)


def residual(x, w, r):  # type: ignore[no-untyped-def]
    return x @ w * 0.5 + r


def mlp(x, w1, b1, w2, b2):  # type: ignore[no-untyped-def]
    return op.relu(x @ w1 + b1) @ w2 + b2


def with_pow(x, w):  # type: ignore[no-untyped-def]
    return op.pow(x @ w, 3.0)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 40), n=st.integers(1, 40), k=st.integers(1, 40),
       fmt=st.sampled_from(sorted(FORMATS)), kind=st.sampled_from(["normal", "wide", "special"]),
       fn=st.sampled_from([matmul, linear, residual]), target=st.sampled_from(TARGETS),
       seed=st.integers(0, 2**16))
def test_matmuls_with_epilogues_on_target_give_the_graph_bits(
        m: int, n: int, k: int, fmt: str, kind: str, fn,  # type: ignore[no-untyped-def]
        target: str, seed: int) -> None:
    # 16-bit operands of odd rows are copied element by element (no 4-byte cp.async)
    rng = np.random.default_rng(seed)
    x, w = _values(rng, (m, k), fmt, kind), _values(rng, (k, n), fmt, kind)
    third = {matmul: [], linear: [_values(rng, (n,), fmt, "normal")],
             residual: [_values(rng, (m, n), fmt, "normal")]}[fn]
    same_on_target(fn, (x, w, *third), target)


@pytest.mark.parametrize("m, n, k", [(1, 1, 1), (1, 3, 1), (2, 1, 1), (70, 9, 1)])
def test_one_product_matmuls_without_a_tensor_core_tile_on_target(m: int, n: int, k: int
                                                                   ) -> None:
    """K = 1 needs no exact accumulator in the simulator (a float64 product is exact),
    but its tile has no tensor-core layout: the lowering takes the exact ``mma``, which
    computes the same bits."""
    rng = np.random.default_rng(m * 100 + n)
    x, w = _values(rng, (m, k), "f32", "special"), _values(rng, (k, n), "f32", "wide")
    b = _values(rng, (n,), "f32", "normal")
    for target in TARGETS:
        same_on_target(matmul, (x, w), target)
        same_on_target(linear, (x, w, b), target)


def test_cancelling_products_and_the_mlp_on_target() -> None:
    """``[1, 2^-24, 2^-40] . [1, 1, 2^-40]`` is above the midpoint ``1 + 2^-24`` only by
    ``2^-80``, which a float64 sum drops; and the two-kernel MLP, larger than one tile."""
    a = np.array([[1.0, 2.0**-24, 2.0**-40]] * 3, np.float32)
    b = np.array([[1.0], [1.0], [2.0**-40]], np.float32)
    lowered = ts.jit(matmul).lower(a, b)
    for target in TARGETS:
        out = np.asarray(lowered.run(a, b, backend="target", target=target).array)
        assert (out == np.float32(1 + 2.0**-23)).all()
    rng = np.random.default_rng(4)
    args = [_values(rng, s, "f32", "wide") for s in [(24, 40), (40, 48), (48,), (48, 16),
                                                       (16,)]]
    same_on_target(mlp, args, "sm_80")


@pytest.mark.parametrize("target", TARGETS)
def test_exact_matmul_ptx_assembles_without_advisories_or_spills(target: str) -> None:
    rng = np.random.default_rng(2)
    cases = [(matmul, [(64, 32), (32, 256)]), (linear, [(40, 70), (70, 33), (33,)]),
             (residual, [(30, 20), (20, 24), (30, 24)]),
             (mlp, [(16, 32), (32, 64), (64,), (64, 16), (16,)])]
    for fn, shapes in cases:
        args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        for kernel in ts.jit(fn).lower(*args).target(target).kernels:
            assembles_clean(kernel)
            assert "mma.sync" not in kernel.ptx and "wgmma" not in kernel.ptx  # no tensor cores


def test_what_exact_kernels_still_refuse_names_the_graph_line() -> None:
    """A pow epilogue computes NumPy's float64 pow, which is not lowered."""
    x, w = np.ones((16, 16), np.float32), np.ones((16, 16), np.float32)
    for target in TARGETS:
        with pytest.raises(TargetGenerationError, match="cannot be lowered") as err:
            ts.jit(with_pow).lower(x, w).run(x, w, backend="target", target=target)
        _, start = inspect.getsourcelines(with_pow)
        assert err.value.loc.line == start + 1
