"""Tile semantics (kernels.md, decisions.md Tile model): ids, lanes, loops, barriers,
asynchronous copies and their waits, exact ``mma`` accumulation, casts and the launch
modes agreeing bit for bit (the orders of reductions: :mod:`.tile_order`)."""
# ruff: noqa: F821 - kernels name their dimensions free (N), the compiler binds them

from __future__ import annotations

from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np

import tessera as ts
from tessera.conformance.cases.common import f64
from tessera.conformance.reference import FORMATS, same_values
from tessera.conformance.registry import KERNEL, case

TILE = "decisions.md Tile model"


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
