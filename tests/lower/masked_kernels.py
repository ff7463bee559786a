"""Kernels with masked (edge-tile) accesses for the lowering tests, written as in
Triton: ``offs = pid * B + arange(B); mask = offs < n`` (kernels compile from their
source file)."""

from __future__ import annotations

import tessera as ts


@ts.kernel
def saxpy_edges(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32], a: ts.f32):
    """y = a * x + y in tiles of 64, the last one masked."""
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 64
    m = (i + ts.tile.arange(64)) < ctx.N
    xv = ts.tile.load(x[i:i + 64], mask=m, other=0.0)
    yv = ts.tile.load(y[i:i + 64], mask=m, other=0.0)
    ts.tile.store(y[i:i + 64], a * xv + yv, mask=m)


@ts.kernel
def scale_edges(a: ts.Tensor["M", "N"], b: ts.Tensor["M", "N"]):
    """b = 2 a + 1 in 8x16 tiles; masked-off elements read -7 (any float format)."""
    ctx = ts.tile.context()
    nt = (ctx.N + 15) // 16
    pid = ts.tile.linear_id()
    i = (pid // nt) * 8
    j = (pid % nt) * 16
    rows = (i + ts.tile.arange(8)) < ctx.M
    cols = (j + ts.tile.arange(16)) < ctx.N
    m = rows[:, None] & cols[None, :]
    x = ts.tile.load(a[i:i + 8, j:j + 16], mask=m, other=-7.0)
    ts.tile.store(b[i:i + 8, j:j + 16], x * 2.0 + 1.0, mask=m)


@ts.kernel
def padded_copy(a: ts.Tensor["N", ts.f32], out: ts.Tensor["P", ts.f32]):
    """``a`` copied into a longer ``out`` in tiles of 16: past ``a``'s end the masked
    load gives its other value, 0.5, which the unmasked store writes."""
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 16
    x = ts.tile.load(a[i:i + 16], mask=(i + ts.tile.arange(16)) < ctx.N, other=0.5)
    out[i:i + 16] = x


@ts.kernel
def count_edges(a: ts.Tensor["N", ts.int32], b: ts.Tensor["N", ts.int32]):
    """b = a + offs for int elements (the index tile meets a register tile)."""
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 32
    offs = i + ts.tile.arange(32)
    m = offs < ctx.N
    x = ts.tile.load(a[i:i + 32], mask=m, other=5)
    ts.tile.store(b[i:i + 32], x + offs, mask=m)


@ts.kernel
def positive_only(x: ts.Tensor["N", ts.f32]):
    """A data-dependent mask: add 1 where x > 1 (in bounds, no edge)."""
    i = ts.tile.linear_id() * 32
    v = x[i:i + 32] + 1.0
    ts.tile.store(x[i:i + 32], v, mask=v > 2.0)


@ts.kernel
def gemm_edges(A: ts.Tensor["MP", "K", ts.bf16], B: ts.Tensor["K", "NP", ts.bf16],
               C: ts.Tensor["M", "N", ts.f32]):
    """A GEMM on operands padded to the tile whose (M, N) result is stored masked: the
    mask is held in the accumulator layout."""
    ctx = ts.tile.context()
    smem_a = ts.tile.alloc_shared((64, 32), ts.bf16)
    smem_b = ts.tile.alloc_shared((32, 64), ts.bf16)
    acc = ts.tile.zeros((64, 64), ts.f32)
    for k in ts.tile.range(0, K, 32):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + 64, k:k + 32])
        ts.tile.cp_async(smem_b, B[k:k + 32, tile_n:tile_n + 64])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    rows = (tile_m + ts.tile.arange(64)) < ctx.M
    cols = (tile_n + ts.tile.arange(64)) < ctx.N
    ts.tile.store(C[tile_m:tile_m + 64, tile_n:tile_n + 64], acc,
                  mask=rows[:, None] & cols[None, :])


@ts.kernel
def leaky_edges(a: ts.Tensor["N", ts.f32], b: ts.Tensor["N", ts.f32]):
    """A planted fault: the mask lets one element past the end through."""
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 16
    m = (i + ts.tile.arange(16)) <= ctx.N  # one lane too many
    x = ts.tile.load(a[i:i + 16], mask=m, other=0.0)  # LEAKY LOAD
    ts.tile.store(b[i:i + 16], x, mask=(i + ts.tile.arange(16)) < ctx.N)


@ts.kernel
def unmasked_edges(a: ts.Tensor["N", ts.f32], b: ts.Tensor["N", ts.f32]):
    """A planted fault: the last tile reads and writes past the end, unmasked."""
    i = ts.tile.linear_id() * 16
    b[i:i + 16] = a[i:i + 16] * 2.0  # UNMASKED


@ts.kernel
def gemm_staged_edges(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                      C: ts.Tensor["M", "N", ts.f32]):
    """A GEMM of any shape: operand tiles loaded masked (zeros past the edge, which add
    zero products) and stored into shared memory, the result stored masked."""
    ctx = ts.tile.context()
    smem_a = ts.tile.alloc_shared((64, 32), ts.bf16)
    smem_b = ts.tile.alloc_shared((32, 64), ts.bf16)
    acc = ts.tile.zeros((64, 64), ts.f32)
    rows = (tile_m + ts.tile.arange(64)) < ctx.M
    cols = (tile_n + ts.tile.arange(64)) < ctx.N
    for k in ts.tile.range(0, K, 32):
        ks = (k + ts.tile.arange(32)) < ctx.K
        smem_a[0:64, 0:32] = ts.tile.load(A[tile_m:tile_m + 64, k:k + 32],
                                          mask=rows[:, None] & ks[None, :], other=0.0)
        smem_b[0:32, 0:64] = ts.tile.load(B[k:k + 32, tile_n:tile_n + 64],
                                          mask=ks[:, None] & cols[None, :], other=0.0)
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    ts.tile.store(C[tile_m:tile_m + 64, tile_n:tile_n + 64], acc,
                  mask=rows[:, None] & cols[None, :])


@ts.kernel
def stage_columns(x: ts.Tensor["R", 32, ts.bf16], out: ts.Tensor["R", 32, ts.bf16],
                  n: ts.int32):
    """Rows staged through shared memory with their first ``n`` columns (a mask whose
    masked-on elements come first in each row: a zero-fill copy)."""
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 16
    staged = ts.tile.alloc_shared((16, 32), ts.bf16)
    m = ((i + ts.tile.arange(16)) < ctx.R)[:, None] & (ts.tile.arange(32) < n)[None, :]
    staged[0:16, 0:32] = ts.tile.load(x[i:i + 16, 0:32], mask=m, other=0.0)
    ts.tile.barrier()
    ts.tile.store(out[i:i + 16, 0:32], staged[0:16, 0:32],
                  mask=((i + ts.tile.arange(16)) < ctx.R)[:, None])


@ts.kernel
def stage_even_columns(x: ts.Tensor["R", 32, ts.bf16], out: ts.Tensor["R", 32, ts.bf16]):
    """Every other column staged (masked-on elements after masked-off ones in a chunk:
    no zero-fill copy expresses it, so registers)."""
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 16
    staged = ts.tile.alloc_shared((16, 32), ts.bf16)
    m = ((i + ts.tile.arange(16)) < ctx.R)[:, None] & (ts.tile.arange(32) % 2 == 1)[None, :]
    staged[0:16, 0:32] = ts.tile.load(x[i:i + 16, 0:32], mask=m, other=0.0)
    ts.tile.barrier()
    ts.tile.store(out[i:i + 16, 0:32], staged[0:16, 0:32],
                  mask=((i + ts.tile.arange(16)) < ctx.R)[:, None])


@ts.kernel
def stage_leaky(x: ts.Tensor["R", 32, ts.f32], out: ts.Tensor["R", 32, ts.f32]):
    """A planted fault: the staged copy's mask lets a row past the end through."""
    ctx = ts.tile.context()
    i = ts.tile.linear_id() * 16
    staged = ts.tile.alloc_shared((16, 32), ts.f32)
    m = ((i + ts.tile.arange(16)) <= ctx.R)[:, None]
    staged[0:16, 0:32] = ts.tile.load(x[i:i + 16, 0:32], mask=m, other=0.0)  # LEAKY STAGE
    ts.tile.barrier()
    ts.tile.store(out[i:i + 16, 0:32], staged[0:16, 0:32],
                  mask=((i + ts.tile.arange(16)) < ctx.R)[:, None])
