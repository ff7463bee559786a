"""The Target IR interpreter's fast tensor-core step equals the golden ascending loop
(:func:`tessera.arch.mma.mma`) bit for bit, and its fragment index maps equal the
coordinate scatters of :mod:`tessera.arch.fragments`."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tessera.arch import fragments
from tessera.arch.mma import mma as golden
from tessera.interp.target.tensorcore import exact_mma
from tessera.interp.target.tensorcore.fragment_maps import FragmentMap

FORMATS = {"bf16": (ml_dtypes.bfloat16, 16), "f16": (np.float16, 16),
           "e4m3": (ml_dtypes.float8_e4m3fn, 32), "e5m2": (ml_dtypes.float8_e5m2, 32)}


def _operands(rng: np.random.Generator, fmt: str, spread: int, shape: tuple[int, int, int, int]
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    dt, _ = FORMATS[fmt]
    g, m, k, n = shape
    a = rng.standard_normal((g, m, k)) * 2.0 ** rng.integers(-spread, spread + 1, (g, m, k))
    b = rng.standard_normal((g, k, n)) * 2.0 ** rng.integers(-spread, spread + 1, (g, k, n))
    c = rng.standard_normal((g, m, n))
    with np.errstate(over="ignore"):
        return a.astype(dt), b.astype(dt), c


def _same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and np.array_equal(x.view(np.uint64), y.view(np.uint64))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("spread", [0, 6, 30, 80])
def test_fast_step_equals_golden_loop(fmt: str, spread: int) -> None:
    rng = np.random.default_rng(spread)
    k = FORMATS[fmt][1]
    for shape in [(4, 16, k, 8), (2, 64, k, 32)]:
        a, b, c = _operands(rng, fmt, spread, shape)
        with np.errstate(all="ignore"):
            assert _same_bits(exact_mma.mma(a, b, c, fmt), golden(a, b, c, fmt))


def test_special_values_take_the_golden_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """Zeros of both signs, a -0 accumulator over a zero sum, infinities and NaNs."""
    calls = []
    monkeypatch.setattr(exact_mma, "golden", lambda *a: calls.append(1) or golden(*a))
    rng = np.random.default_rng(1)
    a, b, c = _operands(rng, "bf16", 2, (3, 16, 16, 8))
    assert _same_bits(exact_mma.mma(a, b, c, "bf16"), golden(a, b, c, "bf16"))
    assert calls == []  # ordinary data: the matmul, not the loop
    a[0, 2] = -0.0
    c[0, 2] = -0.0  # the loop gives -0 + (-0 products summed) ...
    b[1, :, 3] = np.float32(np.inf)
    a[2, 5, 7] = np.float32(np.nan)
    with np.errstate(all="ignore"):
        assert _same_bits(exact_mma.mma(a, b, c, "bf16"), golden(a, b, c, "bf16"))
    assert calls == [1]
    d = exact_mma.mma(a[:1], b[:1] * 0, c[:1] * 0 - 0.0, "bf16")  # -0 + zero sums
    assert _same_bits(d, golden(a[:1], b[:1] * 0, c[:1] * 0 - 0.0, "bf16"))


def test_wide_exponent_ranges_take_the_golden_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(exact_mma, "golden", lambda *a: calls.append(1) or golden(*a))
    a, b, c = _operands(np.random.default_rng(2), "bf16", 0, (1, 16, 16, 8))
    a[0, 0, 0] = 2.0**60  # 1 + 2**60: a partial sum that rounds in float64
    b[0, 0, 0] = 1.0
    a[0, 0, 1] = 2.0**-60
    assert _same_bits(exact_mma.mma(a, b, c, "bf16"), golden(a, b, c, "bf16"))
    assert calls == [1]


def test_only_the_unbounded_matrices_take_the_golden_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch whose matrices are finite takes the loop for those no bound proves
    exact, and the matrix product for the rest: the same bits as the loop over all."""
    shapes = []
    monkeypatch.setattr(exact_mma, "golden",
                        lambda *a: shapes.append(a[0].shape) or golden(*a))
    a, b, c = _operands(np.random.default_rng(4), "bf16", 3, (5, 64, 16, 32))
    a[1, 3, 0], a[1, 3, 1] = 2.0**60, 2.0**-60  # matrices 1 and 3 round in float64
    a[3, 0, 4], b[3, 4, 9] = 2.0**-70, 2.0**70
    assert _same_bits(exact_mma.mma(a, b, c, "bf16"), golden(a, b, c, "bf16"))
    assert shapes == [(2, 64, 16)]


@pytest.mark.parametrize("spread", [0, 6, 30])
@pytest.mark.parametrize("zeros", [False, True])
def test_steps_into_their_accumulator_equal_the_golden_loop(spread: int, zeros: bool) -> None:
    """With kept product arrays, a step whose matrices are all exact adds D into C's
    own array (and returns it); the others make new arrays. Along a chain, each
    step's bits equal the golden loop's, from ``-0`` accumulators too."""
    rng = np.random.default_rng(10 + spread)
    kept: dict[tuple[int, ...], np.ndarray] = {}
    _, _, c = _operands(rng, "bf16", spread, (6, 64, 16, 32))
    if zeros:
        c[:, ::5] = -0.0
    in_place = []
    for _ in range(4):
        a, b, _ = _operands(rng, "bf16", spread, (6, 64, 16, 32))
        if zeros:
            a[:, ::5] = 0.0  # zero sums over -0: the loop's sign
        want = golden(a, b, c, "bf16")
        given = c.copy()
        with np.errstate(all="ignore"):
            d = exact_mma.mma(a, b, given, "bf16", scratch=kept)
            exact = exact_mma._bounded(exact_mma.Operand(a, "bf16"),
                                       exact_mma.Operand(b, "bf16"), 16).all()
        assert _same_bits(d, want)
        # in place where every matrix is exact, and no -0 of C meets a zero sum (whose
        # sign only the loop gives)
        signed = (np.signbit(c) & (c == 0) & (np.abs(a.astype(np.float64)) @
                                              np.abs(b.astype(np.float64)) == 0)).any()
        assert (d is given) == (exact and not signed)
        in_place.append(d is given)
        assert all(x.shape == (6, 64, 32) for x in kept.values())
        c = d
    assert any(in_place) or spread or zeros  # ordinary data: the path is taken


@pytest.mark.parametrize("layout", [fragments.mma_m16n8k16_a(), fragments.mma_m16n8k16_b(),
                                    fragments.mma_m16n8k32_a(), fragments.mma_m16n8k32_b(),
                                    fragments.mma_m16n8_c(), fragments.wgmma_accumulator(64)])
def test_fragment_maps_equal_the_coordinate_scatters(layout: fragments.FragmentLayout) -> None:
    rng = np.random.default_rng(3)
    fmap = FragmentMap(layout)
    groups = np.array([0, 2])
    bits = layout.element_bits
    if bits == 32:
        regs = rng.standard_normal((3 * layout.threads, layout.elements))
        per = regs.reshape(3, layout.threads, -1)[groups]
        want = fragments.from_fragments(per, layout)
        assert np.array_equal(fmap.matrix(regs, groups), want)
        out = np.zeros_like(regs)
        fmap.scatter(want, out, groups)
        assert np.array_equal(out.reshape(3, layout.threads, -1)[groups],
                              fragments.to_fragments(want, layout))
        assert not out.reshape(3, layout.threads, -1)[1].any()
    else:
        nregs = layout.elements * bits // 32
        regs = rng.integers(0, 2**32, (3 * layout.threads, nregs), dtype=np.uint32)
        per = regs.reshape(3, layout.threads, -1)[groups]
        want = fragments.from_fragments(fragments.unpack_registers(per, bits), layout)
        assert np.array_equal(fmap.matrix(regs, groups, bits), want)


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_gather_equals_the_arch_model(num: int, trans: bool) -> None:
    """The interpreter's one-gather ``ldmatrix`` of rows already in lane order equals
    :func:`tessera.arch.ldmatrix.ldmatrix` on shared memory holding those rows
    anywhere (here: shuffled rows of a larger buffer)."""
    from tessera.arch.ldmatrix import ldmatrix
    from tessera.interp.target.tensorcore.mma import ldmatrix_spread

    rng = np.random.default_rng(num + 8 * trans)
    warps = 3
    smem = rng.integers(0, 256, (warps, 4096), dtype=np.uint8)
    rows = np.stack([rng.permutation(256)[: 8 * num] * 16 for _ in range(warps)])
    addrs = np.zeros((warps, 32), np.int64)
    addrs[:, : 8 * num] = rows
    want = ldmatrix(smem, addrs, num, trans)  # (warps, 32, num)
    gathered = np.stack([smem[w][(rows[w][:, None] + np.arange(16)).ravel()]
                         for w in range(warps)])
    elems = gathered.view("<u2")
    got = np.ascontiguousarray(elems[:, ldmatrix_spread(num, trans)]).view(np.uint32)
    assert np.array_equal(got.reshape(warps, 32, num), want)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["bf16", "f16"]),
       st.lists(st.integers(0, 0xFFFF) | st.sampled_from([0, 0x8000, 1, 0x8001, 0x7F80, 0x7C00,
                                                          0xFC00, 0x7FC0, 0x7E00, 0x3F80]),
                min_size=8, max_size=8))
def test_bit_pattern_summaries_equal_the_float_ones(fmt: str, words: list[int]) -> None:
    """Largest magnitude and smallest nonzero exponent per matrix from the bit patterns
    against the float64 path, on patterns with zeros of both signs, subnormals,
    infinities and NaNs; where they differ (an infinity or a NaN), the step is
    unbounded either way."""
    bits = np.array(words, np.uint16).reshape(2, 2, 2)
    with np.errstate(invalid="ignore"):  # NaN patterns cast (as run_target's steps do)
        fast = exact_mma.Operand(bits, fmt)
    values = np.abs(fast.values)
    top, low = values.max(axis=(-2, -1)), exact_mma._low_exponent(values, (-2, -1))
    finite = np.isfinite(top)
    np.testing.assert_array_equal(fast.top[finite], top[finite])
    np.testing.assert_array_equal(fast.low[finite], low[finite])
    assert (~np.isfinite(fast.top[~finite])).all()
    with np.errstate(invalid="ignore", over="ignore"):
        assert finite.all() or not exact_mma._bounded(fast, fast, 16).all()
