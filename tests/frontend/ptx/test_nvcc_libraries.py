"""nvcc's PTX of code written with CUDA's libraries (tests/ir/text/ptx/ptx_corpus/
libraries.cu): CUB's block reduce, scan and radix sort, cooperative groups' tiles, the
math library in float and double, the rounding intrinsics, atomics, ``cuda::barrier``
and ``cuda::pipeline``, clocks, the SIMD intrinsics and carry-chain arithmetic, run on
the CPU by ``ts.ptx`` and compared with references computed another way (NumPy, Python
integers and fractions, the C library's math functions)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import tessera as ts
from tessera.interp.target.state import TargetFault
from tests.frontend.ptx.corpus import CORPUS
from tests.interp.target.ptx.test_directed import F32, F64, rounded

rng = np.random.default_rng(80)


@pytest.fixture(scope="module")
def mod() -> ts.ptx.PtxProgram:
    return ts.ptx.load(CORPUS / "libraries_sm80.ptx")


def test_cub_block_reduce_and_scan(mod) -> None:
    """Integer-valued floats, so that every order of the sums is exact."""
    n = 1000
    x = rng.integers(-1000, 1000, n).astype(np.float32)
    out = np.zeros(4, np.float32)
    mod.kernel("block_sum").run(grid=4, block=256, args=[x, out, np.int32(n)])
    np.testing.assert_array_equal(out, [x[k * 256:(k + 1) * 256].sum() for k in range(4)])
    v = rng.integers(-2**20, 2**20, 1024).astype(np.int32)
    scanned, totals = np.zeros(1024, np.int32), np.zeros(2, np.int32)
    mod.kernel("block_scan").run(grid=2, block=128, args=[v, scanned, totals])
    blocks = v.reshape(2, 512)
    want = np.cumsum(blocks, axis=1) - blocks
    np.testing.assert_array_equal(scanned.reshape(2, 512), want)
    np.testing.assert_array_equal(totals, blocks.sum(axis=1))


def test_cub_block_radix_sort_is_stable(mod) -> None:
    keys = rng.integers(0, 2**32, 1024, dtype=np.uint64).astype(np.uint32)
    keys[:64] = keys[64:128]  # equal keys keep their order
    out, where = np.zeros_like(keys), np.zeros(1024, np.int32)
    mod.kernel("radix_sort").run(grid=2, block=128, args=[keys, out, where])
    for blk in range(2):
        part = slice(512 * blk, 512 * (blk + 1))
        order = np.argsort(keys[part], kind="stable") + 512 * blk
        np.testing.assert_array_equal(out[part], keys[order])
        np.testing.assert_array_equal(where[part], order)


def test_warp_collectives_and_tiles_of_sixteen(mod) -> None:
    n = 120  # the last warp half empty: its lanes hold 0
    v = rng.integers(-100, 101, n).astype(np.int32)
    out = np.zeros(8 * n, np.int32)
    mod.kernel("warp_ops").run(grid=1, block=128, args=[v, out, np.int32(n)])
    got = out.reshape(n, 8).astype(np.int64)
    lanes = np.r_[v, np.zeros(128 - n, np.int32)].astype(np.int64)
    warps, halves = lanes.reshape(4, 32), lanes.reshape(8, 16)
    i = np.arange(n)
    np.testing.assert_array_equal(got[:, 0], warps.max(axis=1)[i // 32])
    np.testing.assert_array_equal(got[:, 1], warps.sum(axis=1)[i // 32])
    same = [sum(1 << j for j in range(32) if warps[k // 32, j] & 7 == lanes[k] & 7)
            for k in i]
    np.testing.assert_array_equal(got[:, 2] & 0xFFFFFFFF, same)
    ballot = [sum(1 << j for j in range(32) if warps[w, j] > 0) for w in range(4)]
    np.testing.assert_array_equal(got[:, 3] & 0xFFFFFFFF, np.array(ballot)[i // 32])
    np.testing.assert_array_equal(got[:, 4], (lanes > 0).sum())
    np.testing.assert_array_equal(got[:, 5], int((lanes > -100).all()) + 2 * int(
        (lanes > 90).any()))
    np.testing.assert_array_equal(got[:, 6], halves.sum(axis=1)[i // 16])
    np.testing.assert_array_equal(got[:, 7], halves[:, 0][i // 16])


def _ulps(got: np.ndarray, want: np.ndarray, dt: type) -> np.ndarray:
    """|got - want| in units of the last place of ``want`` rounded to ``dt`` (0 where
    both are equal or both NaN; beyond ``dt``'s range ``got`` must be the infinity)."""
    with np.errstate(all="ignore"):
        rounded = want.astype(dt)
        unit = np.spacing(np.abs(rounded)).astype(np.float64)
        err = np.abs(got.astype(np.float64) - want) / unit
        overflow = np.isinf(rounded) & ~np.isinf(want)
    err[overflow] = np.where(got[overflow] == rounded[overflow], 0, np.inf)
    err[(got == want) | (np.isnan(got) & np.isnan(want))] = 0
    return err


def _c_library(f, *args: np.ndarray) -> np.ndarray:
    """``f`` of each element in float64 by Python's math module (the C library, within an
    ulp of float64); NaN where it raises."""
    out = []
    for vs in zip(*args):
        try:
            out.append(f(*map(float, vs)))
        except (ValueError, OverflowError, ZeroDivisionError):
            out.append(math.nan)
    return np.array(out)


def test_float_math_within_the_documented_bounds(mod) -> None:
    """Each function within the maximum ulp error CUDA's math API documents for it
    (sinf, cosf, expf, erff, tanhf 2; logf, cbrtf, log1pf 1; powf 4; atan2f 3; rsqrtf 2;
    sqrtf and division correctly rounded), measured against float64; ``__saturatef``
    exact."""
    n = 256
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    x[:8] = [1e30, -3e7, 0.0, -0.0, 1e-40, 100.0, 0.5, np.nan]
    out = np.zeros(14 * n, np.float32)
    mod.kernel("math_f32").run(grid=2, block=128, args=[x, y, out, np.int32(n)])
    got = out.reshape(n, 14)
    a, b = x.astype(np.float64), y.astype(np.float64)
    with np.errstate(all="ignore"):
        wants = {0: (np.sin(a), 2), 1: (np.cos(a), 2), 2: (np.exp(a), 2),
                 3: (np.log(np.abs(a)), 1), 4: (np.abs(a) ** b, 4),
                 5: (_c_library(math.erf, a), 2), 6: (np.tanh(a), 2),
                 7: (np.sqrt(np.abs(a)), 0.5), 8: (a / b, 0.5), 9: (np.arctan2(a, b), 3),
                 10: (np.cbrt(a), 1), 11: (1 / np.sqrt(np.abs(a)), 2),
                 13: (np.log1p(np.abs(a)), 1)}
    for k, (want, bound) in wants.items():
        err = _ulps(got[:, k], want, np.float32)
        assert err.max() <= bound, (k, int(err.argmax()), err.max())
    saturated = np.where(np.isnan(a), 0.0, np.clip(a, 0.0, 1.0))  # NaN and -0 to +0
    np.testing.assert_array_equal(got[:, 12].view(np.uint32),
                                  (saturated + 0.0).astype(np.float32).view(np.uint32))


def test_double_math_and_huge_arguments(mod) -> None:
    """sin and cos of 1e300 reduce their argument by a 1/pi table through the carry
    chain (``mad.lo.cc``/``madc``). Bounds: CUDA documents 2 ulp for sin, cos and pow,
    1 for exp and log, correctly rounded division and square root; the C library's
    answer is within an ulp more."""
    n = 256
    x, y = rng.standard_normal(n) * 10, rng.standard_normal(n)
    x[:8] = [1e300, -3e17, 0.0, -0.0, 1e-310, 1e22, 710.0, 2.0**-1074]
    out = np.zeros(7 * n)
    mod.kernel("math_f64").run(grid=2, block=128, args=[x, y, out, np.int32(n)])
    got = out.reshape(n, 7)

    def log_abs(v: float) -> float:
        return math.log(abs(v)) if v else -math.inf
    wants = {0: (_c_library(math.sin, x), 3), 1: (_c_library(math.cos, x), 3),
             2: (_c_library(math.exp, x), 2), 3: (_c_library(log_abs, x), 2),
             4: (_c_library(lambda p, q: abs(p) ** q, x, y), 3)}
    for k, (want, bound) in wants.items():
        finite = np.isfinite(want)
        assert (np.isinf(got[~finite, k]) | np.isnan(want[~finite])).all()
        err = _ulps(got[finite, k], want[finite], np.float64)
        assert err.max() <= bound, (k, err.max())
    np.testing.assert_array_equal(got[:, 5], x / y)
    np.testing.assert_array_equal(got[:, 6], np.sqrt(np.abs(x)))


def test_atomics_and_clocks(mod) -> None:
    n = 200
    x = rng.integers(-1000, 1000, n).astype(np.float32)
    total, top = np.zeros(1), np.zeros(1, np.int32)
    bits = np.array([0, 0xFFFFFFFF, 0], np.uint32)
    ring, backwards = np.zeros(1, np.uint32), np.zeros(1, np.uint64)
    mod.kernel("atomics").run(grid=2, block=128,
                              args=[x, total, top, bits, ring, backwards, np.int32(n)])
    assert total[0] == x.astype(np.float64).sum()
    assert top.view(np.float32)[0] == np.abs(x).max()
    np.testing.assert_array_equal(bits, [0xFFFFFFFF, 0xFFFFFFFF & ~((1 << 29) - 1),
                                         np.bitwise_xor.reduce(np.arange(n))])
    assert ring[0] == n % 10  # atomicInc wraps past 9 to 0
    assert backwards[0] == 0


def _lanes(v: np.ndarray, width: int, signed: bool) -> np.ndarray:
    """The ``32 // width`` lanes of each word, lowest first, as Python-sized integers."""
    parts = [(v.astype(np.int64) >> (width * k)) & ((1 << width) - 1)
             for k in range(32 // width)]
    lanes = np.stack(parts, axis=1)
    return np.where(lanes >> (width - 1), lanes - (1 << width), lanes) if signed else lanes


def _pack(lanes: np.ndarray, width: int) -> np.ndarray:
    return sum((lanes[:, k] & ((1 << width) - 1)) << (width * k)
               for k in range(lanes.shape[1])).astype(np.uint32)


def _simd_lanes(base: str, s: np.ndarray, u: np.ndarray, t: np.ndarray, v: np.ndarray,
                width: int) -> np.ndarray:
    """One SIMD intrinsic's lanes: ``s``, ``u`` the first operand's lanes signed and
    unsigned, ``t``, ``v`` the second's."""
    low, high, top = -(1 << (width - 1)), (1 << (width - 1)) - 1, (1 << width) - 1
    compare = {"eq": u == v, "ges": s >= t, "gtu": u > v, "ltu": u < v, "ne": u != v}
    if base.startswith("vcmp"):
        return np.where(compare[base[4:]], top, 0)
    if base.startswith("vset"):
        return compare[base[4:]].astype(np.int64)
    return {"vabs": np.abs(s), "vabsdiffs": np.abs(s - t), "vabsdiffu": np.abs(u - v),
            "vabsss": np.minimum(np.abs(s), high), "vadd": u + v,
            "vaddss": np.clip(s + t, low, high), "vaddus": np.minimum(u + v, top),
            "vavgs": (s + t + (s + t >= 0)) >> 1, "vavgu": (u + v + 1) >> 1,
            "vhaddu": (u + v) >> 1, "vmaxs": np.maximum(s, t), "vmaxu": np.maximum(u, v),
            "vmins": np.minimum(s, t), "vminu": np.minimum(u, v), "vneg": -s,
            "vnegss": np.minimum(-s, high), "vsub": u - v,
            "vsubss": np.clip(s - t, low, high), "vsubus": np.maximum(u - v, 0)}[base]


def _simd_reference(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    """The SIMD intrinsics as CUDA's math API defines them, lane by lane in int64; the
    sums of absolute differences (``vsads2``, ``vsadu4``) as one 32-bit sum."""
    out = []
    for name in SIMD_NAMES:
        width = 16 if name.endswith("2") else 8
        s, u = _lanes(x, width, True), _lanes(x, width, False)
        t, v = _lanes(y, width, True), _lanes(y, width, False)
        if name.startswith("vsad"):
            diff = np.abs(s - t) if name == "vsads2" else np.abs(u - v)
            out.append(diff.sum(axis=1).astype(np.uint32))
        else:
            out.append(_pack(_simd_lanes(name[:-1], s, u, t, v, width), width))
    return out


SIMD_NAMES = ["vabs2", "vabs4", "vabsdiffs2", "vabsdiffs4", "vabsdiffu2", "vabsdiffu4",
              "vabsss2", "vabsss4", "vadd2", "vadd4", "vaddss2", "vaddss4", "vaddus2",
              "vaddus4", "vavgs2", "vavgs4", "vavgu2", "vavgu4", "vcmpeq2", "vcmpges4",
              "vcmpgtu2", "vcmpltu4", "vhaddu2", "vhaddu4", "vmaxs2", "vmaxu4", "vmins4",
              "vminu2", "vneg2", "vnegss4", "vsads2", "vsadu4", "vseteq2", "vsetges4",
              "vsetltu2", "vsub2", "vsub4", "vsubss2", "vsubus4", "vsetne4"]


def test_simd_intrinsics(mod) -> None:
    n = 256
    x, y = (rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    edges = np.array([0x80008000, 0x7FFF7FFF, 0x80807F7F, 0xFFFFFFFF, 0, 0x01FF80FE],
                     np.uint32)
    x[:6], y[:6] = edges, edges[::-1]
    out = np.zeros(40 * n, np.uint32)
    mod.kernel("simd").run(grid=2, block=128, args=[x, y, out, np.int32(n)])
    got = out.reshape(n, 40)
    for k, want in enumerate(_simd_reference(x, y)):
        np.testing.assert_array_equal(got[:, k], want, err_msg=SIMD_NAMES[k])


def test_carry_chains_bit_masks_and_shift_amounts(mod) -> None:
    n = 256
    words = rng.integers(0, 2**32, (2, n, 4), dtype=np.uint64).astype(np.uint32)
    words[:, :4] = [[0xFFFFFFFF] * 4, [0] * 4, [0xFFFFFFFF, 0, 0xFFFFFFFF, 0], [1, 0, 0, 0]]
    a, b = (np.ascontiguousarray(w) for w in words)
    total, diff, prod = (np.zeros((n, 4), np.uint32) for _ in range(3))
    masks = np.zeros((n, 3), np.uint32)
    mod.kernel("wide_ints").run(grid=2, block=128,
                                args=[a, b, total, diff, prod, masks, np.int32(n)])

    def value(row: np.ndarray) -> int:
        return sum(int(w) << (32 * k) for k, w in enumerate(row))
    for i in range(n):
        x, y = value(a[i]), value(b[i])
        assert value(total[i]) == (x + y) % 2**128
        assert value(diff[i]) == (x - y) % 2**128
        assert value(prod[i]) == (x % 2**64) * (y % 2**64)
        pos, width = int(a[i, 0]) & 63, int(b[i, 0]) & 63
        clamp = 0 if pos >= 32 else ((1 << min(width, 32)) - 1 << pos) & 0xFFFFFFFF
        wpos, wwidth = pos & 31, width & 31
        wrap = ((1 << wwidth) - 1 << wpos) & 0xFFFFFFFF
        assert (int(masks[i, 0]), int(masks[i, 1])) == (clamp, wrap), (pos, width)
        v = int(a[i, 1]) >> (int(b[i, 1]) & 31)
        assert int(masks[i, 2]) == (0xFFFFFFFF if v == 0 else 32 - v.bit_length())


def test_rounding_intrinsics(mod) -> None:
    """``__fdiv_rz``, ``__fsqrt_rd``, ``__frcp_ru``, ``__fmul_rz``, ``__fadd_rd``,
    ``__fmaf_ru``, ``__float2int_rd``, ``__fma_rz``, ``__ddiv_ru``, ``__dsqrt_rd`` and
    ``__drcp_rz``: each the exact value rounded in its direction."""
    n = 64
    x = (rng.standard_normal(n) * 100).astype(np.float32)
    y = (rng.standard_normal(n)).astype(np.float32)
    u = rng.standard_normal(n) * 1e3
    x[:2], y[:2], u[:2] = [6.0, 1e-30], [3.0, 7e20], [2.0, 1e-300]
    out, wide = np.zeros(8 * n, np.float32), np.zeros(4 * n)
    mod.kernel("rounding").run(grid=1, block=n, args=[x, y, u, out, wide, np.int32(n)])
    f32, f64 = out.reshape(n, 8), wide.reshape(n, 4)
    for i in range(n):
        a, b, v = Fraction(float(x[i])), Fraction(float(y[i])), Fraction(float(u[i]))
        exact32 = {0: (a / b, "rz"), 2: (1 / b, "rp"), 3: (a * b, "rz"), 4: (a + b, "rm"),
                   5: (a * b + 1, "rp"), 7: (1 / a, "rp")}
        for k, (value, rnd) in exact32.items():
            assert f32[i, k] == rounded(value, F32, rnd), (i, k)
        root = f32[i, 1]  # the largest f32 whose square is at most |a|
        assert Fraction(float(root)) ** 2 <= abs(a) < Fraction(float(
            np.nextafter(root, np.float32(np.inf)))) ** 2
        assert f32[i, 6] == math.floor(x[i])
        exact64 = {0: (v * v + 1, "rz"), 1: (v / 3, "rp"), 3: (1 / v, "rz")}
        for k, (value, rnd) in exact64.items():
            assert f64[i, k] == rounded(value, F64, rnd), (i, k)
        root = f64[i, 2]
        assert Fraction(float(root)) ** 2 <= abs(v) < Fraction(float(
            np.nextafter(root, np.inf))) ** 2


def test_memcpy_async_through_a_barrier_and_a_pipeline(mod) -> None:
    """``cuda::memcpy_async`` completed by a ``cuda::barrier`` (sm_80's ``mbarrier``
    with ``cp.async.mbarrier.arrive``, the arrival's state token and ``test_wait``) and
    by a two-stage ``cuda::pipeline``."""
    x = rng.integers(-2**30, 2**30, 512).astype(np.int32)
    out = np.zeros(512, np.int32)
    mod.kernel("barrier_copy").run(grid=2, block=256, args=[x, out])
    np.testing.assert_array_equal(out.reshape(2, 256), x.reshape(2, 256)[:, ::-1])
    total = np.zeros(128, np.int32)
    mod.kernel("pipeline_sum").run(grid=1, block=128, args=[x, total])
    np.testing.assert_array_equal(total, x.reshape(4, 128).sum(axis=0, dtype=np.int32))


def test_copies_not_tied_to_the_barrier_are_read_in_flight() -> None:
    """Without its ``cp.async.mbarrier.arrive`` the barrier does not wait for the
    copies: the read of another thread's element is reported at its line."""
    text = (CORPUS / "libraries_sm80.ptx").read_text()
    start = text.index(".entry barrier_copy")
    arrive = text.index("cp.async.mbarrier.arrive", start)
    read = text.index("ld.shared", arrive)
    broken = text[:arrive] + "// " + text[arrive:]
    line = text[:read].count("\n") + 1
    x, out = np.arange(512, dtype=np.int32), np.zeros(512, np.int32)
    with pytest.raises(TargetFault, match=rf":{line}: .*(in flight|before)"):
        ts.ptx.load(broken).kernel("barrier_copy").run(grid=2, block=256, args=[x, out])


def test_scoped_atomics(mod) -> None:
    x, first = np.zeros(4, np.int32), np.zeros(1, np.uint64)
    flag = np.zeros(1, np.float32)
    mod.kernel("scoped_atomics").run(grid=2, block=64, args=[x, first, flag])
    np.testing.assert_array_equal(x, [128, 127, 128, 128])
    assert first[0] == 1 and flag[0] == 1.5  # thread 0 of CTA 0 swaps first


def test_grid_sync_needs_a_cooperative_launch(mod) -> None:
    """cooperative groups' ``grid.sync()`` spins on the barrier word of the grid
    workspace that ``%envreg1``/``%envreg2`` address; a plain launch has none, and the
    kernel's own check traps, with what to do."""
    x = rng.integers(-1000, 1000, 4 * 256).astype(np.int32)
    partial, total = np.zeros(4, np.int32), np.zeros(1, np.int32)
    kernel = mod.kernel("grid_sum")
    kernel.run(grid=4, block=256, args=[x, partial, total], cooperative=True)
    np.testing.assert_array_equal(partial, x.reshape(4, 256).sum(axis=1))
    assert total[0] == x.sum()
    with pytest.raises(TargetFault, match="trap") as err:
        kernel.run(grid=4, block=256, args=[x, np.zeros(4, np.int32), total])
    assert "cooperative=True" in (err.value.hint or "")


def test_a_decoupled_look_back_scan_makes_progress(mod) -> None:
    """Each block's thread 0 spins on its predecessors' flags while the rest of its CTA
    waits at ``bar.sync``: the spinning threads must not starve the thread that sets
    the flag they wait for (independent thread scheduling, sm_70 and later)."""
    n = 6
    x = rng.integers(-1000, 1000, 256 * n).astype(np.int32)
    out, status = np.zeros_like(x), np.zeros(n, np.uint64)
    mod.kernel("lookback_scan").run(grid=n, block=256,
                                    args=[x, out, status, np.zeros(1, np.int32)])
    np.testing.assert_array_equal(out, np.cumsum(x, dtype=np.int32))
    np.testing.assert_array_equal(status >> np.uint64(32), 2)
