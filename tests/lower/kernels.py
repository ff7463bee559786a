"""Small kernels for lowering tests (kernels are compiled from their source file)."""

from __future__ import annotations

import tessera as ts


@ts.kernel
def scale_unguarded(x: ts.Tensor["N", ts.f32]):
    """x[i] *= 3 with no bounds guard: correct only when exactly N tiles run."""
    i = ts.tile.linear_id()
    x[i] = x[i] * 3.0


@ts.kernel
def first_element(x: ts.Tensor["N", ts.f32]) -> ts.f32:
    """A scalar result (tile 0's value) from a launch of several CTAs."""
    return x[ts.tile.linear_id()] * 2.0


@ts.kernel
def gemm_f16(A: ts.Tensor["M", "K", ts.f16], B: ts.Tensor["K", "N", ts.f16],
             C: ts.Tensor["M", "N", ts.f32]):
    """The example GEMM on f16 inputs (exact products, f32 result rounded once)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.f16)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.f16)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for k in ts.tile.range(0, K, BK):
        ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b, B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.barrier()
        acc = ts.tile.mma(smem_a, smem_b, acc)
        ts.tile.barrier()
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


def split_k_slice(A, B):
    """The group's BK slice of ``A @ B`` for its output tile, rounded to f32 (inlined)."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16)
    ts.tile.cp_async(smem_a, A[tile_m:tile_m + BM, tile_k:tile_k + BK])
    ts.tile.cp_async(smem_b, B[tile_k:tile_k + BK, tile_n:tile_n + BN])
    ts.tile.barrier()
    acc = ts.tile.mma(smem_a, smem_b)
    return ts.tile.cast(acc, ts.f32)


@ts.kernel
def gemm_split_k(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                 C: ts.Tensor["M", "N", ts.f32]):
    """The quick-start GEMM as written (one BK slice per group, added into C), with the
    slice rounded to f32 before the add, as a GPU's atomic add does."""
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] += split_k_slice(A, B)


@ts.kernel
def accumulate_rows(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["C", ts.f32]):
    """Every tile adds its row into ``out`` (blocked-layout '+=' from many CTAs)."""
    out[0:C] += x[tile_m]


@ts.kernel
def stage(x: ts.Tensor["R", "C"], out: ts.Tensor["R", "C"]):
    """A tile copied into shared memory asynchronously and written back (any format)."""
    staged = ts.tile.alloc_shared((BM, C), x.dtype)
    ts.tile.cp_async(staged, x[tile_m:tile_m + BM, 0:C])
    ts.tile.cp_wait_group(0)
    out[tile_m:tile_m + BM, 0:C] = staged


@ts.kernel
def stage_complex(x: ts.Tensor["R", "C", ts.complex64]):
    """An async copy of a format the PTX backend has no element type for."""
    staged = ts.tile.alloc_shared((BM, C), ts.complex64)
    ts.tile.cp_async(staged, x[tile_m:tile_m + BM, 0:C])
    ts.tile.cp_wait_group(0)


@ts.kernel
def recopy_in_loop(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", "C", ts.f32]):
    """A copy right before a loop whose body opens with a copy: from the second trip the
    body's copy overwrites ``again`` while other warps may still read it."""
    first = ts.tile.alloc_shared((BM, C), ts.f32)
    again = ts.tile.alloc_shared((BM, C), ts.f32)
    src = x[tile_m:tile_m + BM, 0:C]
    stop = tile_m + 2 * BM  # two trips; the bounds come before the copy
    ts.tile.cp_async(first, src)
    for _ in ts.tile.range(tile_m, stop, BM):
        ts.tile.cp_async(again, src)
        ts.tile.cp_wait_group(0)
        out[tile_m:tile_m + BM, 0:C] = first + again


@ts.kernel
def add_acc_into_strided(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                         C: ts.Tensor["M", "N", 2, ts.f32]):
    """'+=' of a rounded accumulator into a view whose columns are 2 elements apart."""
    C[tile_m:tile_m + BM, tile_n:tile_n + BN, 0] += split_k_slice(A, B)


@ts.kernel
def add_row_sums(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", ts.f32]):
    """'+=' of a row-reduced tile."""
    out[tile_m:tile_m + BM] += ts.tile.row_sum(x[tile_m:tile_m + BM, 0:C])


@ts.kernel
def mma_over_copy(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                  C: ts.Tensor["M", "N", ts.f32]):
    """The second K slice is copied while the first is multiplied: an mma right after a
    commit, with no wait in between."""
    a0, a1 = ts.tile.alloc_shared((BM, BK), ts.bf16), ts.tile.alloc_shared((BM, BK), ts.bf16)
    b0, b1 = ts.tile.alloc_shared((BK, BN), ts.bf16), ts.tile.alloc_shared((BK, BN), ts.bf16)
    ts.tile.cp_async(a0, A[tile_m:tile_m + BM, 0:BK])
    ts.tile.cp_async(b0, B[0:BK, tile_n:tile_n + BN])
    ts.tile.cp_wait_group(0)
    ts.tile.cp_async(a1, A[tile_m:tile_m + BM, BK:2 * BK])
    ts.tile.cp_async(b1, B[BK:2 * BK, tile_n:tile_n + BN])
    ts.tile.cp_commit_group()
    acc = ts.tile.mma(a0, b0)
    ts.tile.cp_wait_group(0)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = ts.tile.mma(a1, b1, acc)


def first_panels(A, B):
    """The first K slice of the tile's bf16 A row panel and B column panel, copied into
    shared memory (a helper, inlined into the kernels that call it)."""
    a = ts.tile.alloc_shared((BM, BK), ts.bf16)
    b = ts.tile.alloc_shared((BK, BN), ts.bf16)
    ts.tile.cp_async(a, A[tile_m:tile_m + BM, 0:BK])
    ts.tile.cp_async(b, B[0:BK, tile_n:tile_n + BN])
    ts.tile.cp_wait_group(0)
    return a, b


@ts.kernel
def branchy_product(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                    C: ts.Tensor["M", "N", ts.f32], n: ts.int32):
    """An mma result through an if and a while (the value slots of structured ops)."""
    a, b = first_panels(A, B)
    zero = ts.tile.zeros((BM, BN), ts.f32)
    if n > 0:
        out = ts.tile.mma(a, b)
    else:
        out = zero
    k = 0
    while k < n:
        out = out + zero
        k = k + 1
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = out


@ts.kernel
def wide_join(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
              C: ts.Tensor["M", "N", ts.f32], n: ts.int32):
    """An accumulator whose slots one path fills with an mma result and another with
    narrow values (a loop of ``n`` trips, a branch taken by the tiles of row ``n``):
    the slots are wide on every path, so the adds after them are float64 sums."""
    a, b = first_panels(A, B)
    p = ts.tile.mma(a, b)
    acc = ts.tile.zeros((BM, BN), ts.f32)
    for _ in ts.tile.range(0, n):
        acc = ts.tile.mma(a, b, acc)
    if tile_m == n * BM:
        acc = ts.tile.mma(a, b, acc)
    else:
        acc = acc + p * 0.1
    acc = acc + p * 0.3
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc + p * 0.7


@ts.kernel
def doubled(x: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """A returned tile (its output tensor is described by the kernel's attributes)."""
    return x[tile_m:tile_m + BM, 0:N] * 2.0


@ts.kernel
def stage_at(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", 32, ts.f32], c0: ts.int32):
    """An async copy of 32 columns from a column given at run time."""
    staged = ts.tile.alloc_shared((BM, 32), ts.f32)
    ts.tile.cp_async(staged, x[tile_m:tile_m + BM, c0:c0 + 32])
    ts.tile.cp_wait_group(0)
    out[tile_m:tile_m + BM, 0:32] = staged


@ts.kernel
def stage_from_2(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", 32, ts.f32]):
    """An async copy starting at column 2: its start is a multiple of 8 bytes only."""
    staged = ts.tile.alloc_shared((BM, 32), ts.f32)
    ts.tile.cp_async(staged, x[tile_m:tile_m + BM, 2:34])
    ts.tile.cp_wait_group(0)
    out[tile_m:tile_m + BM, 0:32] = staged


@ts.kernel
def stage_bf16_from_1(x: ts.Tensor["R", "C", ts.bf16]):
    """A bf16 async copy starting at column 1: 2-byte aligned, below cp.async's 4."""
    staged = ts.tile.alloc_shared((BM, 32), ts.bf16)
    ts.tile.cp_async(staged, x[tile_m:tile_m + BM, 1:33])
    ts.tile.cp_wait_group(0)


@ts.kernel
def stage_k_slices(x: ts.Tensor["R", "C", ts.bf16], out: ts.Tensor["R", "C", ts.bf16]):
    """Copies at the index of ts.tile.range(0, C, 16): 32-byte aligned starts."""
    staged = ts.tile.alloc_shared((BM, 16), ts.bf16)
    for k in ts.tile.range(0, C, 16):
        ts.tile.cp_async(staged, x[tile_m:tile_m + BM, k:k + 16])
        ts.tile.cp_wait_group(0)
        out[tile_m:tile_m + BM, k:k + 16] = staged
        ts.tile.barrier()


@ts.kernel
def gemm_into_column(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                     C: ts.Tensor["M", "W", ts.f32], c0: ts.int32):
    """A product stored from a column given at run time (unaligned column pairs)."""
    smem_a, smem_b = first_panels(A, B)
    col = c0 + tile_n
    C[tile_m:tile_m + BM, col:col + BN] = ts.tile.mma(smem_a, smem_b)


@ts.kernel
def positive_mask(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    """A comparison written on memory (no load first), then used as a select."""
    i = ts.tile.linear_id() * 32
    out[i:i + 32] = ts.tile.where(x[i:i + 32] > 0.0, x[i:i + 32], 0.0)


@ts.kernel
def every_tile_adds(x: ts.Tensor["N"], total: ts.Tensor[1]):
    """Every tile adds its element into one total (several per CTA, several CTAs): f32
    (the order shows in the bits) or int32 (atomics in any order)."""
    i = ts.tile.linear_id()
    if i < N:
        total[0] += x[i]


@ts.kernel
def every_tile_multiplies(x: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32]):
    """Every tile multiplies one product by its element: not associative in f32."""
    i = ts.tile.linear_id()
    if i < N:
        total[0] *= x[i]


@ts.kernel
def tiles_add_their_own(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    """Each tile adds into its own element: no two tiles meet."""
    i = ts.tile.linear_id()
    if i < N:
        out[i] += x[i]


@ts.kernel
def tiles_add_a_scalar(x: ts.Tensor["M", ts.f32], total: ts.Tensor[1, ts.f32]):
    """A block kernel (one tile per CTA of 128 threads) adding one scalar per tile."""
    total[0] += x[tile_m]
    x[tile_m:tile_m + BM] = x[tile_m:tile_m + BM] * 2.0


@ts.kernel
def add_whole_tile_sum(data: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32]):
    """Each tile adds the sum of its whole 1-D tile into ``total[0]``."""
    t = data[tile_m * 128:(tile_m + 1) * 128]
    total[0] += ts.tile.reduce_sum(t, axis=0)


@ts.kernel
def cast_and_store(A: ts.Tensor["M", "K", ts.bf16], B: ts.Tensor["K", "N", ts.bf16],
                   C: ts.Tensor["M", "N", ts.bf16], D: ts.Tensor["M", "N", ts.bf16]):
    """One product, rounded to bf16 twice over: cast then stored, and stored."""
    smem_a = ts.tile.alloc_shared((BM, BK), ts.bf16)
    smem_b = ts.tile.alloc_shared((BK, BN), ts.bf16)
    ts.tile.cp_async(smem_a, A[0:BM, 0:BK])
    ts.tile.cp_async(smem_b, B[0:BK, 0:BN])
    ts.tile.barrier()
    acc = ts.tile.mma(smem_a, smem_b)
    C[0:BM, 0:BN] = ts.tile.cast(acc, ts.bf16)
    D[0:BM, 0:BN] = acc
