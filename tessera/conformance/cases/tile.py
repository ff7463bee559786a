"""Tile semantics (kernels.md, decisions.md Tile model): ids, lanes, loops, barriers,
asynchronous copies and their waits, exact ``mma`` accumulation, the order of ``+=``
across groups and tiles, row sums, casts and the launch modes agreeing bit for bit."""
# ruff: noqa: F821 - kernels name their dimensions free (N), the compiler binds them

from __future__ import annotations

import functools
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.conformance.cases.common import f64
from tessera.conformance.reference import FORMATS, same_values
from tessera.conformance.registry import KERNEL, case

TILE = "decisions.md Tile model"
ORDER = "decisions.md Numerics: the reference order of every reduction is fixed"


@ts.kernel
def ids(lin: ts.Tensor["N", ts.int32], grp: ts.Tensor["N", ts.int32],
        loc: ts.Tensor["N", ts.int32], size: ts.Tensor["N", ts.int32]):
    i = ts.tile.linear_id()
    lin[i] = i
    grp[i] = ts.tile.group_id()
    loc[i] = ts.tile.local_id()
    size[i] = ts.tile.group_size()


@case("tile.ids.linear-id", spec=f"{TILE}: linear_id = group_id * group_size + local_id",
      backends=KERNEL)
def _ids(ctx: Any) -> None:
    """With grid 3 and group size 4: linear ids 0..11, each group_id * 4 + local_id."""
    out = [np.full(12, -1, np.int32) for _ in range(4)]
    ctx.launch(ids, *out, grid=3, group_size=4)
    lin, grp, loc, size = out
    assert np.array_equal(lin, np.arange(12)) and np.array_equal(size, np.full(12, 4))
    assert np.array_equal(grp, np.arange(12) // 4) and np.array_equal(loc, np.arange(12) % 4)


@ts.kernel
def lanes(out: ts.Tensor["N", ts.int32]):
    out[0:32] = ts.tile.lane_id()


@case("tile.ids.lane-id", spec=f"{TILE}: 32 implicit lanes per tile", backends=KERNEL)
def _lanes(ctx: Any) -> None:
    """``lane_id()`` is the 1-D tile [0, ..., 31]."""
    out = np.full(32, -1, np.int32)
    ctx.launch(lanes, out, grid=1)
    assert np.array_equal(out, np.arange(32))


@ts.kernel
def range_sum(out: ts.Tensor["N", ts.int32]):
    total = 0
    for i in ts.tile.range(3, 40, 7):
        total += i * i
    out[ts.tile.linear_id()] = total


@case("tile.range.python-results", spec=f"{TILE}: ts.tile.range is a sequential loop with "
      "Python range results", backends=KERNEL)
def _range(ctx: Any) -> None:
    """A ``ts.tile.range(3, 40, 7)`` loop visits exactly Python's ``range(3, 40, 7)``."""
    out = np.zeros(2, np.int32)
    ctx.launch(range_sum, out, grid=2)
    assert np.array_equal(out, np.full(2, sum(i * i for i in range(3, 40, 7))))


@ts.kernel
def publish(x: ts.Tensor["G", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((1,), ts.f32)
    if ts.tile.local_id() == 0:
        buf[0] = x[ts.tile.group_id()]
    ts.tile.barrier()
    out[ts.tile.linear_id()] = buf[0] + ts.tile.local_id()


@case("tile.barrier.publishes-shared", spec=f"{TILE}: alloc_shared is collective; barrier",
      backends=KERNEL)
def _publish(ctx: Any) -> None:
    """Tile 0 of each group writes the shared buffer; after the barrier every tile of
    that group (and only that group) reads it."""
    x = np.array([10.0, 20.0, 30.0], np.float32)
    out = np.zeros(12, np.float32)
    ctx.launch(publish, x, out, grid=3, group_size=4)
    assert np.array_equal(out, np.repeat(x, 4) + np.tile(np.arange(4), 3))


@ts.kernel
def two_stage(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", "K", ts.f32]):
    first = ts.tile.alloc_shared((8, 8), ts.f32)
    second = ts.tile.alloc_shared((8, 8), ts.f32)
    ts.tile.cp_async(first, A[0:8, 0:8])
    ts.tile.cp_commit_group()
    ts.tile.cp_async(second, A[8:16, 0:8])
    ts.tile.cp_commit_group()
    ts.tile.cp_wait_group(1)  # the older group is complete; the newer may not be
    out[0:8, 0:8] = first
    ts.tile.cp_wait_group(0)
    out[8:16, 0:8] = second


@case("tile.cp-async.wait-group", spec="decisions.md Tile model: cp_async copies complete at "
      "cp_wait_group(n)", backends=KERNEL)
def _wait_group(ctx: Any) -> None:
    """``cp_wait_group(1)`` completes all but the newest group: reading the older copy is
    legal, the newer is read after ``cp_wait_group(0)``; both arrive intact."""
    a = np.arange(128, dtype=np.float32).reshape(16, 8)
    out = np.zeros_like(a)
    ctx.launch(two_stage, a, out, grid=1)
    assert np.array_equal(out, a)


@ts.kernel
def barrier_completes(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", "K", ts.f32]):
    smem = ts.tile.alloc_shared((8, 8), ts.f32)
    ts.tile.cp_async(smem, A[0:8, 0:8])
    ts.tile.barrier()
    out[0:8, 0:8] = smem + 1.0


@case("tile.cp-async.barrier-completes", spec="decisions.md Tile model: copies complete at "
      "barrier(); uncommitted copies are committed implicitly", backends=KERNEL)
def _barrier_completes(ctx: Any) -> None:
    """An uncommitted ``cp_async`` completes at ``barrier()``: no report, data arrived."""
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    out = np.zeros_like(a)
    ctx.launch(barrier_completes, a, out, grid=1)
    assert np.array_equal(out, a + 1)


@ts.kernel
def mma_loop(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
             C: ts.Tensor["M", "N", ts.f32]):
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@case("tile.mma.exact-accumulation", spec="decisions.md Numerics: mma sums K exactly in "
      "float64, rounds once at the store; kernels.md §7", backends=KERNEL)
def _mma_exact(ctx: Any) -> None:
    """Products 2^16, 2^-16 and -2^16 in one K chain: f32 accumulation loses the small
    term; the kernel keeps it, across K blocks, and rounds once."""
    a = np.zeros((64, 64), np.float32)
    b = np.zeros((64, 64), np.float32)
    a[:, 0], a[:, 20], a[:, 40] = 256.0, 2.0**-8, -256.0
    b[0, :], b[20, :], b[40, :] = 256.0, 2.0**-8, 256.0
    a16, b16 = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    c = np.zeros((64, 64), np.float32)
    ctx.launch(mma_loop, a16, b16, c, tile_shape=(64, 64, 16))
    assert np.all(c == np.float32(2.0**-16)), np.unique(c)
    f32_chain = (np.float32(65536.0) + np.float32(2.0**-16)) - np.float32(65536.0)
    assert f32_chain == 0.0  # what an f32 accumulator would give


@ts.kernel
def add_in_group_order(x: ts.Tensor["N", ts.f32], out: ts.Tensor["R", ts.f32]):
    out[0] += x[ts.tile.linear_id()]


def _order(grid: int, group_size: int) -> Any:
    def run(ctx: Any) -> None:
        n = grid * group_size
        x = np.ones(n, np.float32)
        x[0] = 2.0**24  # 2^24 + 1 rounds back to 2^24 (a tie, to even) in f32
        x[-1] = -(2.0**24)
        out = np.zeros(1, np.float32)
        ctx.launch(add_in_group_order, x, out, grid=grid, group_size=group_size)
        want = functools.reduce(lambda s, v: np.float32(s + v), x, np.float32(0.0))
        assert out[0] == want and want == 0.0, (out, want)  # the exact sum is n - 2

    run.__doc__ = (f"``out[0] += x[i]`` over {grid} groups of {group_size}: f32 additions in "
                   "ascending group, then local id order (2^24 first makes the ones vanish).")
    return run


case("tile.reduce.group-order", spec=f"{ORDER}: += in ascending group order",
     backends=KERNEL)(_order(8, 1))
case("tile.reduce.local-order", spec=f"{ORDER}: within a group, ascending local id",
     backends=KERNEL)(_order(2, 4))


@ts.kernel
def add_in_loop_order(x: ts.Tensor["N", 2, ts.f32], out: ts.Tensor["R", ts.f32]):
    i = ts.tile.linear_id()
    for k in range(2):
        out[0] += x[i, k]


@case("tile.reduce.loop-order", spec=f"{ORDER}: a tile's += in a loop, tile by tile",
      backends=KERNEL)
def _loop_order(ctx: Any) -> None:
    """Each of 8 tiles adds its two elements in a loop: tile 0's 2^24 and -2^24 cancel
    first and the 14 ones count (tile order, then iteration); iteration-major order
    would lose the ones added while 2^24 is there (7)."""
    x = np.ones((8, 2), np.float32)
    x[0] = 2.0**24, -(2.0**24)
    out = np.zeros(1, np.float32)
    ctx.launch(add_in_loop_order, x, out, grid=8)
    assert out[0] == 14.0, out


@ts.kernel
def scale_by_key(x: ts.Tensor["N", ts.f32], key: ts.Tensor["N", ts.int32],
                 out: ts.Tensor["B", ts.f32]):
    i = ts.tile.linear_id()
    out[key[i]] *= x[i]


@case("tile.reduce.data-order", spec=f"{ORDER}: updates of elements chosen by data, "
      "in tile order", backends=KERNEL)
def _data_order(ctx: Any) -> None:
    """``out[key[i]] *= x[i]`` (no atomic multiplies): each bin is the f32 product of
    its tiles' factors in tile order; the reverse order differs in some bin."""
    rng = np.random.default_rng(5)
    x = (1 + rng.standard_normal(96) / 4).astype(np.float32)
    key = rng.integers(0, 4, 96).astype(np.int32)
    out = np.ones(4, np.float32)
    ctx.launch(scale_by_key, x, key, out, grid=3, group_size=32)

    def product(order: np.ndarray) -> np.ndarray:
        bins = np.ones(4, np.float32)
        for i in order:
            bins[key[i]] = np.float32(bins[key[i]] * x[i])
        return bins
    want = product(np.arange(96))
    assert not np.array_equal(want, product(np.arange(96)[::-1]))
    assert np.array_equal(out, want), (out, want)


@ts.kernel
def split_k_in_order(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                     C: ts.Tensor["M", "N", ts.f32]):
    sa = ts.tile.alloc_shared((BM, BK), ts.bf16)
    sb = ts.tile.alloc_shared((BK, BN), ts.bf16)
    ts.tile.cp_async(sa, A[tile_m:tile_m + BM, tile_k:tile_k + BK])
    ts.tile.cp_async(sb, B[tile_k:tile_k + BK, tile_n:tile_n + BN])
    ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] += ts.tile.cast(ts.tile.mma(sa, sb), ts.f32)


@case("tile.reduce.split-k-order", spec=f"{ORDER}: a tile's += in ascending group order",
      backends=KERNEL)
def _split_k_order(ctx: Any) -> None:
    """A split-K GEMM whose four K slices' products are 2^24, 1, 1 and -2^24 in every
    element: added into C in slice (group) order they give 0 (each 1 vanishes in a
    tie to even); another order gives 1 or 2."""
    a = np.zeros((64, 64), np.float32)
    b = np.zeros((64, 64), np.float32)
    for s, v in enumerate((2.0**24, 1.0, 1.0, -(2.0**24))):
        a[:, 16 * s], b[16 * s, :] = 1.0, v
    c = np.zeros((64, 64), np.float32)
    ctx.launch(split_k_in_order, a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16),
               c, tile_shape=(64, 64, 16))
    assert not c.any(), np.unique(c)


@ts.kernel
def rowsum(x: ts.Tensor["M", "N", ts.f32], out: ts.Tensor["M", ts.f32]):
    out[0:M] = ts.tile.row_sum(x[0:M, 0:N])


def _pairwise(v: np.ndarray) -> float:
    """A float64 pairwise tree over adjacent elements."""
    vals = [float(t) for t in v]
    while len(vals) > 1:
        vals = [vals[i] + vals[i + 1] if i + 1 < len(vals) else vals[i]
                for i in range(0, len(vals), 2)]
    return vals[0]


@case("tile.row-sum.pairwise-tree", spec=f"{ORDER}: a float row_sum is a float64 pairwise "
      "tree over adjacent elements", backends=KERNEL)
def _rowsum(ctx: Any) -> None:
    """``row_sum`` equals the float64 pairwise tree rounded once to f32."""
    rng = np.random.default_rng(41)
    x = (rng.standard_normal((4, 64)) * 2.0 ** rng.integers(-30, 30, (4, 64))).astype(
        np.float32)
    out = np.zeros(4, np.float32)
    ctx.launch(rowsum, x, out, grid=1)
    assert np.array_equal(out, np.array([np.float32(_pairwise(r)) for r in x]))


@ts.kernel
def to_fp8(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.fp8_e4m3]):
    out[0:N] = ts.tile.cast(x[0:N], ts.fp8_e4m3)


@case("tile.cast.fp8-rne-satfinite", spec="kernels.md §3: cast rounds to nearest even, "
      "satfinite", backends=KERNEL)
def _cast(ctx: Any) -> None:
    """``ts.tile.cast`` to fp8_e4m3 follows the conversion rules: ties to even, clamp
    at 448, NaN stays NaN."""
    fmt = FORMATS["fp8_e4m3"]
    x = np.array([1.0625, 1.1875, 17.0, 19.0, 464.0, 1e6, -1e6, 0.0009765625, np.nan, 3.3] +
                 [0.0] * 22, np.float32)
    out = np.zeros(32, ml_dtypes.float8_e4m3fn)
    ctx.launch(to_fp8, x, out, grid=1)
    want = np.array([fmt.round(Fraction(float(v))) if np.isfinite(v) else np.nan for v in x])
    assert same_values(out, want).all(), (f64(out), want)


@ts.kernel
def scale_rows(x: ts.Tensor["M", "N", ts.f32], s: ts.Tensor["M", ts.f32],
               out: ts.Tensor["M", "N", ts.f32]):
    out[0:M, 0:N] = s[0:M] * x[0:M, 0:N]


@case("tile.broadcast.rows", spec=f"{TILE}: a 1-D tile of the row count broadcasts along "
      "rows", backends=KERNEL)
def _broadcast(ctx: Any) -> None:
    """``s * x`` with ``len(s) == rows`` scales row i by s[i]."""
    x = np.arange(32, dtype=np.float32).reshape(4, 8)
    s = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
    out = np.zeros_like(x)
    ctx.launch(scale_rows, x, s, out, grid=1)
    assert np.array_equal(out, s[:, None] * x)


@ts.kernel
def edge(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id() * 8
    mask = i + ts.tile.arange(8) < N
    v = ts.tile.load(x[i:i + 8], mask=mask, other=-1.0)
    ts.tile.store(out[i:i + 8], v * 2.0, mask=mask)


@case("tile.masked.edge-tile", spec="decisions.md Kernel modes: masked loads and stores; "
      "a masked-off lane never touches memory", backends=KERNEL)
def _masked(ctx: Any) -> None:
    """The last tile of 20 elements in tiles of 8 reaches past the end; masked, it
    touches only the 4 elements inside (no report)."""
    x = np.arange(20, dtype=np.float32)
    out = np.zeros(20, np.float32)
    ctx.launch(edge, x, out, grid=3)
    assert np.array_equal(out, 2 * x)


@case("tile.modes.agree", spec="decisions.md Kernel modes: reference and checked give the "
      "same bits in every schedule")
def _modes(ctx: Any) -> None:
    """The exact K loop gives the same bits in reference mode and in checked mode under
    both schedules."""
    rng = np.random.default_rng(43)
    a = rng.standard_normal((64, 96)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((96, 64)).astype(ml_dtypes.bfloat16)
    outs = []
    for kw in ({"mode": "reference"}, {"schedule": "vectorized"}, {"schedule": "sequential"}):
        c = np.zeros((64, 64), np.float32)
        mma_loop(a, b, c, tile_shape=(32, 32, 32), **kw)
        outs.append(c)
    assert all(np.array_equal(outs[0], o) for o in outs[1:])
    assert np.array_equal(outs[0], (f64(a) @ f64(b)).astype(np.float32))
