"""Bool, int8 and fp8 tiles under ``backend="target"``: a bool is one byte (0 or 1, as
NumPy stores it) loaded with ``ld.u8`` into a predicate and stored as ``selp`` 1/0 with
``st.u8``; an int8 lives in an ``s32`` register (``ld.s8``); an fp8 value in an f32
register, widened from its byte exactly and rounded back after each op
(:mod:`tessera.lower.arith.fp8`). Comparisons stored as bool tensors, ``where`` with a bool
mask argument, comparisons of bools, int8 casts, every fp8 byte, the rounding of f32
values to fp8 (ties, subnormals, overflow, NaN), fp8 elementwise chains, exact fp8
sums, means, centring and RMS norms (rounded once into the format), and causal
attention whose mask is a bool tensor give the graph interpreter's bits on sm_80 and
sm_90a, and their PTX assembles with no advisory and no spills. The byte tensors have
sizes that are not multiples of 4: the interpreter faults on any byte read past a
buffer's end, so none is."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tessera as ts
from tessera import op
from tests.frontend.graph.lowered.same import TARGETS, assembles_clean, same_on_target

FORMATS = {"f32": ts.f32, "bf16": ts.bf16}
FP8 = {"e4m3": (ts.fp8_e4m3, ml_dtypes.float8_e4m3fn), "e5m2": (ts.fp8_e5m2,
                                                                 ml_dtypes.float8_e5m2)}


def _as(fmt: str, x: np.ndarray) -> np.ndarray:
    return ts.Tensor(np.asarray(x, np.float64), FORMATS[fmt]).array


def greater(x, y):  # type: ignore[no-untyped-def]
    return x > y


def masked_fill(x, m):  # type: ignore[no-untyped-def]
    return op.where(m, x * 2.0, -1.0)


def bool_compares(m, n):  # type: ignore[no-untyped-def]
    """Every comparison of two bool tensors, as a weighted sum of f32 bits."""
    out = op.where(m < n, 1.0, 0.0)
    for k, c in enumerate([m <= n, m > n, m >= n, op.equal(m, n), op.not_equal(m, n)]):
        out = out + op.cast(c, ts.f32) * float(2 ** (k + 1))
    return out


shapes = st.lists(st.integers(1, 19), min_size=1, max_size=3).map(tuple)


@settings(max_examples=8, deadline=None)
@given(shape=shapes, fmt=st.sampled_from(sorted(FORMATS)), seed=st.integers(0, 2**16))
def test_compares_and_bool_masks_give_the_graph_bits(shape: tuple[int, ...], fmt: str,
                                                     seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, y = (_as(fmt, rng.standard_normal(shape)) for _ in range(2))
    x.flat[0] = y.flat[0]  # an equal pair
    m, n = (rng.random(shape) < 0.5 for _ in range(2))
    same_on_target(greater, [x, y])
    same_on_target(masked_fill, [x, m])
    same_on_target(bool_compares, [m, n])


def test_a_bool_mask_broadcast_over_rows_and_nan_compares() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((13, 7)).astype(np.float32)
    x[2, 3], x[5, :] = np.nan, np.inf
    m = rng.random(7) < 0.5
    same_on_target(masked_fill, [x, m])
    same_on_target(lambda a, b: op.not_equal(a, b), [x, x])  # NaN != NaN
    same_on_target(lambda a, b: op.where(a >= b, a, b), [x, x[::-1].copy()])


def test_int8_tiles_and_casts_to_integers() -> None:
    """int8 tiles are selected and widened exactly; a cast to int8 or int32 rounds half
    to even, maps NaN to 0 and saturates, as the interpreters convert."""
    rng = np.random.default_rng(2)
    a = rng.integers(-128, 128, (11, 9)).astype(np.int8)
    b = rng.integers(-128, 128, (11, 9)).astype(np.int8)
    a[0, :4] = [-128, 127, 0, -1]
    same_on_target(lambda p, q: op.where(p > q, p, q), [a, b])
    same_on_target(lambda p: op.cast(p, ts.f32) * 0.5, [a])
    x = (rng.standard_normal((11, 9)) * 150).astype(np.float32)
    x[0, :8] = [np.nan, np.inf, -np.inf, 2.5, -2.5, 3.5, 127.5, -128.5]
    same_on_target(lambda p: op.cast(p, ts.int8), [x])
    same_on_target(lambda p: op.cast(p, ts.int32), [x * 1e7])
    m = rng.random((11, 9)) < 0.5
    same_on_target(lambda p: op.cast(p, ts.int8), [m])


def _rounding_cases(dt: type, rng: np.random.Generator) -> np.ndarray:
    """f32 values that round to fp8 ``dt`` in every way: the grid, the midpoints and
    their neighbours, subnormals, beyond the largest value, infinities, NaN."""
    grid = np.sort(np.arange(256, dtype=np.uint8).view(dt).astype(np.float64))
    grid = grid[np.isfinite(grid)]
    mid = ((grid[1:] + grid[:-1]) / 2).astype(np.float32)
    special = np.array([np.inf, -np.inf, np.nan, -np.nan, 1e30, -1e30, 1e-30, -0.0, 464,
                        480, 500, 57344, 61440, 65504, 7e4], np.float32)
    out = np.concatenate([grid.astype(np.float32), mid, np.nextafter(mid, np.inf),
                          np.nextafter(mid, -np.inf), special,
                          (rng.standard_normal(300) * 100).astype(np.float32),
                          (rng.standard_normal(100) * 1e-3).astype(np.float32)])
    return np.resize(out, (-(-out.size // 37), 37))  # rows that are no multiple of 4


@pytest.mark.parametrize("fmt", sorted(FP8))
def test_fp8_bytes_widen_and_f32_rounds_to_fp8(fmt: str) -> None:
    """Every byte of the format (NaNs, infinities, subnormals) widened to f32, and f32
    values rounded to the format, to nearest even, saturating, as the interpreters do."""
    tfmt, dt = FP8[fmt]
    every = np.arange(256, dtype=np.uint8).view(dt).reshape(16, 16)
    same_on_target(lambda a: op.cast(a, ts.f32), [every])
    cases = _rounding_cases(dt, np.random.default_rng(5))
    same_on_target(lambda a: op.cast(a, tfmt), [cases])
    same_on_target(lambda a: op.cast(op.cast(a, tfmt), ts.f32) * 0.5, [cases])


@settings(max_examples=4, deadline=None)
@given(shape=shapes, fmt=st.sampled_from(sorted(FP8)), seed=st.integers(0, 2**16))
def test_fp8_elementwise_chains_give_the_graph_bits(shape: tuple[int, ...], fmt: str,
                                                   seed: int) -> None:
    """fp8 arithmetic computes in f32 and rounds back after each op."""
    rng = np.random.default_rng(seed)
    tfmt = FP8[fmt][0]
    x, y = (ts.Tensor(rng.standard_normal(shape) * 8, tfmt).array for _ in range(2))
    same_on_target(lambda a, b: op.where(a > b, a * b + 0.3, a - b / 3.0), [x, y])


def fp8_mean(x):  # type: ignore[no-untyped-def]
    return op.mean(x, axis=-1, keepdims=True)


def fp8_center(x):  # type: ignore[no-untyped-def]
    return x - op.mean(x, axis=-1, keepdims=True)


def fp8_rms(x):  # type: ignore[no-untyped-def]
    return x / op.sqrt(op.mean(x * x, axis=-1, keepdims=True) + 1e-6)


def fp8_sum(x):  # type: ignore[no-untyped-def]
    return op.sum(x, axis=-1)


FP8_REDUCTIONS = {"mean": fp8_mean, "center": fp8_center, "rms": fp8_rms, "sum": fp8_sum}


def _fp8_rows(rng: np.random.Generator, shape: tuple[int, ...], dt: type,
              specials: int) -> np.ndarray:
    """fp8 values over the format's whole range (normal values scaled by powers of two,
    subnormals, the largest finite value of either sign, zeros of either sign, NaN and
    infinities) at ``specials`` random places among normal values."""
    info = ml_dtypes.finfo(dt)
    top = int(np.log2(float(info.max)))
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-4, 4, shape))
    edge = [float(info.max), -float(info.max), float(info.smallest_subnormal),
            -float(info.smallest_subnormal), float(info.smallest_normal), 0.0, -0.0,
            np.nan, 2.0 ** top, 3 * float(info.smallest_subnormal)]
    if dt is ml_dtypes.float8_e5m2:
        edge += [np.inf, -np.inf]
    flat = x.reshape(-1)
    for k in rng.integers(0, flat.size, specials):
        flat[k] = edge[rng.integers(len(edge))]
    return x.astype(dt)


fp8_shapes = st.one_of(
    st.tuples(st.integers(1, 9), st.just(1)),  # rows of one element
    st.lists(st.integers(1, 19), min_size=2, max_size=3).map(tuple))


@settings(max_examples=12, deadline=None)
@given(shape=fp8_shapes, fmt=st.sampled_from(sorted(FP8)),
       chain=st.sampled_from(sorted(FP8_REDUCTIONS)), specials=st.integers(0, 3),
       seed=st.integers(0, 2**16))
def test_exact_fp8_reductions_give_the_graph_bits(shape: tuple[int, ...], fmt: str,
                                                  chain: str, specials: int,
                                                  seed: int) -> None:
    """An exact row sum or mean of fp8 values (widened exactly to f32) rounded once into
    the fp8 format: to odd in f64 and f32, then to nearest even with saturation."""
    x = _fp8_rows(np.random.default_rng(seed), shape, FP8[fmt][1], specials)
    same_on_target(FP8_REDUCTIONS[chain], [x])


@pytest.mark.parametrize("fmt", sorted(FP8))
def test_exact_fp8_reductions_round_at_the_edges(fmt: str) -> None:
    """Rows whose sums overflow the format (they saturate), cancel to +0, land on the
    subnormals and on ties between fp8 neighbours, or hold NaN and infinities; and more
    rows than threads, so that a thread rounds two accumulators."""
    tfmt, dt = FP8[fmt]
    info = ml_dtypes.finfo(dt)
    big, tiny = float(info.max), float(info.smallest_subnormal)
    rows = [[big] * 5, [-big] * 5, [big, -big, tiny, 0.0, 0.0],
            [tiny, tiny, tiny, -tiny, 0.0],
            [1.0, 2.0 ** -3, 2.0 ** -4, 0.0, 0.0], [1.0, 2.0 ** -4, 0.0, 0.0, 0.0],
            [1.0, 2.0 ** -3, 0.0, 0.0, 0.0],
            [np.nan, 1.0, 1.0, 1.0, 1.0], [-0.0] * 5, [0.0, -0.0, 0.0, -0.0, 0.0]]
    if fmt == "e5m2":
        rows += [[np.inf, 1.0, 1.0, 1.0, 1.0], [np.inf, -np.inf, 1.0, 1.0, 1.0]]
    edges = np.array(rows, np.float64).astype(dt)
    for fn in FP8_REDUCTIONS.values():
        same_on_target(fn, [edges])
    for row in edges:  # 1-D: one sum
        same_on_target(fp8_sum, [row])
    many = ts.Tensor(np.random.default_rng(7).standard_normal((131, 3)) * 4, tfmt).array
    same_on_target(fp8_rms, [many])


def causal_where(q, k, v, mask):  # type: ignore[no-untyped-def]
    s = op.matmul(q, op.transpose(k, (0, 2, 1))) * 0.125
    return op.matmul(op.softmax(op.where(mask, s, -1e9)), v)


def causal_where_4d(q, k, v, mask):  # type: ignore[no-untyped-def]
    s = op.matmul(q, op.transpose(k, (0, 1, 3, 2))) * 0.125
    return op.matmul(op.softmax(op.where(mask, s, -1e9)), v)


def blocked_where(q, k, v, mask):  # type: ignore[no-untyped-def]
    """Scores cut into key blocks of 16 by their tile: the mask is read per block,
    its ragged last block masked."""
    s = op.matmul(q, op.transpose(k, (0, 2, 1)), tile_shape=(8, 16)) * 0.125
    return op.matmul(op.softmax(op.where(mask, s, -1e9)), v)


def _qkv(rng: np.random.Generator, shape: tuple[int, ...], fmt: str) -> list[np.ndarray]:
    if fmt == "bf16":  # cp.async moves rows of whole 4-byte words
        shape = (*shape[:-1], 2 * (-(-shape[-1] // 2)))
    return [_as(fmt, rng.standard_normal(shape) * 2.0) for _ in range(3)]


def _causal(shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.tri(shape[-1], dtype=bool), shape).copy()


@settings(max_examples=5, deadline=None)
@given(b=st.integers(1, 2), s=st.integers(1, 16), d=st.integers(1, 8),
       fmt=st.sampled_from(sorted(FORMATS)), seed=st.integers(0, 2**16))
def test_causal_attention_with_a_bool_mask_gives_the_graph_bits(b: int, s: int, d: int,
                                                                 fmt: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    same_on_target(causal_where, [*_qkv(rng, (b, s, d), fmt), _causal((b, s, s))])


def test_4d_and_key_block_causal_attention_with_a_bool_mask() -> None:
    rng = np.random.default_rng(3)
    same_on_target(causal_where_4d, [*_qkv(rng, (1, 2, 7, 4), "f32"), _causal((1, 2, 7, 7))])
    same_on_target(causal_where_4d, [*_qkv(rng, (2, 1, 5, 3), "bf16"), _causal((2, 1, 5, 5))])
    q, k, v = _qkv(rng, (1, 40, 4), "f32")
    q[0, 3, 1] = np.inf  # a row of NaN and infinite scores
    same_on_target(blocked_where, [q, k, v, _causal((1, 40, 40))], ["sm_80"])


def test_causal_attention_with_a_bool_mask_at_64_and_130_keys() -> None:
    """Eight programs of eight query rows (64 keys), and 130 keys (a row tile of
    fewer query rows, rows that are no multiple of 4 bytes)."""
    rng = np.random.default_rng(6)
    same_on_target(causal_where, [*_qkv(rng, (1, 64, 8), "f32"), _causal((1, 64, 64))],
                    ["sm_90a"])
    same_on_target(causal_where, [*_qkv(rng, (1, 130, 8), "f32"), _causal((1, 130, 130))],
                    ["sm_80"])


@pytest.mark.parametrize("target", TARGETS)
def test_byte_kernels_ptx_assembles_without_advisories_or_spills(target: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((33, 17)).astype(np.float32)
    cases = [(greater, [x, x], "st.global.u8"),
             (masked_fill, [x, rng.random((33, 17)) < 0.5], "ld.global.u8"),
             (causal_where, [*_qkv(rng, (4, 64, 16), "f32"), _causal((4, 64, 64))],
              "ld.global.u8"),
             (blocked_where, [*_qkv(rng, (1, 40, 4), "f32"), _causal((1, 40, 40))],
              "ld.global.u8")]
    for tfmt, _ in FP8.values():
        y = ts.Tensor(x, tfmt).array
        cases.append((lambda a, b: op.where(a > b, a * b + 0.3, a - b / 3.0), [y, y],
                      "st.global.u8"))
        cases += [(fn, [y], "red.shared.add.u64") for fn in (fp8_center, fp8_rms)]
    for fn, args, byte_access in cases:
        (kernel,) = ts.jit(fn).lower(*args).target(target).kernels
        assert byte_access in kernel.ptx
        assembles_clean(kernel)
