"""The tile-kernel seeds of the specification, verbatim (test_seeds.py says what each
computes as written). Sources: programming-model-guide.md (tile_example,
process_chunks, cooperative_reduction, memory_hierarchy_example,
optimized_memory_access, double_buffered_gemm) and overview-and-quickstart.md
(saxpy, gemm, flash_attention). Their corrected versions are in ``kernels/``.

Kernels compile when first launched, so the seeds that cannot compile (undefined
names) still define here. Trailing whitespace of the originals is stripped.
"""
# ruff: noqa: F841

import math

import tessera as ts


@ts.kernel
def tile_example(data: ts.Tensor["N", ts.f32]):
    # Get tile identification
    tile_id = ts.tile.linear_id()
    group_id = ts.tile.group_id()
    lane_id = ts.tile.lane_id()

    # Tile-level operations
    if tile_id < N:
        # Each tile processes one element
        data[tile_id] *= 2.0


@ts.kernel
def process_chunks(input: ts.Tensor["N", ts.f32],
                  output: ts.Tensor["N", ts.f32]):
    # Process data in chunks
    CHUNK_SIZE = 128

    for chunk_start in ts.tile.range(0, N, CHUNK_SIZE):
        # Each tile group processes a chunk
        chunk_end = min(chunk_start + CHUNK_SIZE, N)

        # Cooperative processing within tile group
        for i in ts.tile.range(chunk_start, chunk_end):
            output[i] = process(input[i])


@ts.kernel
def cooperative_reduction(data: ts.Tensor["N", ts.f32]) -> ts.f32:
    # Allocate shared memory for tile group
    shared_sum = ts.tile.alloc_shared((128,), ts.f32)

    # Each tile computes partial sum
    tile_id = ts.tile.linear_id()
    local_sum = 0.0

    for i in ts.tile.range(tile_id, N, ts.tile.group_size()):
        local_sum += data[i]

    # Store to shared memory
    shared_sum[ts.tile.local_id()] = local_sum

    # Synchronize tile group
    ts.tile.barrier()

    # Cooperative reduction
    stride = ts.tile.group_size() // 2
    while stride > 0:
        if ts.tile.local_id() < stride:
            shared_sum[ts.tile.local_id()] += shared_sum[ts.tile.local_id() + stride]
        ts.tile.barrier()
        stride //= 2

    return shared_sum[0]


@ts.kernel
def memory_hierarchy_example(A: ts.Tensor["M", "N", ts.f32]):
    # 1. Register allocation (tile-local)
    reg_value = ts.tile.alloc_register(ts.f32)

    # 2. Shared memory allocation (group-local)
    shared_tile = ts.tile.alloc_shared((64, 64), ts.f32, swizzle="xor")

    # 3. Global memory access
    global_value = A[i, j]

    # 4. Async memory operations
    ts.tile.cp_async(shared_tile, A[block_m:block_m+64, block_n:block_n+64])
    ts.tile.cp_commit_group()
    ts.tile.cp_wait_group(0)


@ts.kernel
def optimized_memory_access(src: ts.Tensor["M", "N", ts.bf16],
                           dst: ts.Tensor["M", "N", ts.bf16]):
    # Coalesced access pattern
    TILE_M, TILE_N = 128, 128

    # Allocate shared memory with bank conflict avoidance
    smem = ts.tile.alloc_shared((TILE_M, TILE_N), ts.bf16,
                                swizzle="xor",      # XOR swizzling
                                alignment=16)        # 128-bit alignment

    # Vectorized loads for maximum bandwidth
    for i in ts.tile.range(0, TILE_M, 4):
        # Load 4 elements at once
        vec4 = ts.tile.load_vector(src[block_m + i], width=4)
        ts.tile.store_vector(smem[i], vec4)


@ts.kernel
def double_buffered_gemm(A: ts.Tensor["M", "K", ts.bf16],
                        B: ts.Tensor["K", "N", ts.bf16],
                        C: ts.Tensor["M", "N", ts.f32]):
    # Allocate double buffers
    smem_a = [
        ts.tile.alloc_shared((BM, BK), ts.bf16),
        ts.tile.alloc_shared((BM, BK), ts.bf16)
    ]
    smem_b = [
        ts.tile.alloc_shared((BK, BN), ts.bf16),
        ts.tile.alloc_shared((BK, BN), ts.bf16)
    ]

    # Pipeline stages
    write_stage = 0
    compute_stage = 1

    # Prefetch first blocks
    ts.tile.cp_async(smem_a[write_stage], A[0:BM, 0:BK])
    ts.tile.cp_async(smem_b[write_stage], B[0:BK, 0:BN])

    for k in ts.tile.range(BK, K, BK):
        # Start loading next blocks
        write_stage, compute_stage = compute_stage, write_stage
        ts.tile.cp_async(smem_a[write_stage], A[0:BM, k:k+BK])
        ts.tile.cp_async(smem_b[write_stage], B[k:k+BK, 0:BN])

        # Wait for previous load and compute
        ts.tile.cp_wait_group(0)
        ts.tile.barrier()

        # Compute on current blocks
        C += ts.tile.mma(smem_a[compute_stage], smem_b[compute_stage])


@ts.kernel
def gemm(A: ts.Tensor["M", "K", ts.bf16],
         B: ts.Tensor["K", "N", ts.bf16],
         C: ts.Tensor["M", "N", ts.f32]) -> ts.Tensor["M", "N", ts.f32]:
    """Matrix multiplication using tensor cores"""
    # Allocate shared memory tiles
    smem_a = ts.tile.alloc_shared((64, 32), ts.bf16, swizzle="xor")
    smem_b = ts.tile.alloc_shared((32, 64), ts.bf16, swizzle="xor")

    # Load tiles asynchronously
    ts.tile.cp_async(smem_a, A[tile_m:tile_m+64, tile_k:tile_k+32])
    ts.tile.cp_async(smem_b, B[tile_k:tile_k+32, tile_n:tile_n+64])
    ts.tile.barrier()

    # Compute using tensor cores
    acc = ts.tile.mma(smem_a, smem_b, accumulator=ts.f32)

    # Store result
    C[tile_m:tile_m+64, tile_n:tile_n+64] += acc
    return C


@ts.kernel.autotune(
    space=dict(
        BLOCK_M=[64, 128],
        BLOCK_N=[64, 128],
        num_warps=[4, 8],
        num_stages=[2, 3]
    )
)
def flash_attention(Q: ts.Tensor["B*H", "S", "D", ts.bf16],
                   K: ts.Tensor["B*H", "S", "D", ts.bf16],
                   V: ts.Tensor["B*H", "S", "D", ts.bf16],
                   is_causal: bool = True) -> ts.Tensor["B*H", "S", "D", ts.bf16]:
    """Flash Attention with online softmax"""

    # Tile configuration from autotuner
    ctx = ts.tile.context()
    BM, BN = ctx.BLOCK_M, ctx.BLOCK_N

    # Allocate shared memory
    smem_q = ts.tile.alloc_shared((BM, ctx.D), ts.bf16)
    smem_k = ts.tile.alloc_shared((BN, ctx.D), ts.bf16)
    smem_v = ts.tile.alloc_shared((BN, ctx.D), ts.bf16)

    # Initialize accumulators
    acc = ts.tile.zeros((BM, ctx.D), ts.f32)
    m_i = ts.tile.full((BM,), -float('inf'), ts.f32)
    l_i = ts.tile.zeros((BM,), ts.f32)

    # Main loop with online softmax
    for q_block in ts.tile.range(0, ctx.S, BM):
        # Load Q block
        ts.tile.cp_async(smem_q, Q[q_block:q_block+BM])

        for kv_block in ts.tile.range(0, ctx.S, BN):
            # Load K,V blocks
            ts.tile.cp_async(smem_k, K[kv_block:kv_block+BN])
            ts.tile.cp_async(smem_v, V[kv_block:kv_block+BN])
            ts.tile.barrier()

            # Compute attention scores
            scores = ts.tile.mma(smem_q, smem_k.T) * (1.0 / math.sqrt(ctx.D))

            # Apply causal mask if needed
            if is_causal:
                scores = ts.tile.causal_mask(scores, q_block, kv_block)

            # Online softmax update
            m_new = ts.tile.row_max(scores)
            m_i_new = ts.tile.maximum(m_i, m_new)

            # Compute correction factors
            alpha = ts.tile.exp(m_i - m_i_new)
            beta = ts.tile.exp(m_new - m_i_new)

            # Update accumulator
            p = ts.tile.exp(scores - m_i_new)
            l_i = alpha * l_i + beta * ts.tile.row_sum(p)
            acc = alpha * acc + ts.tile.mma(p, smem_v)

            m_i = m_i_new

    # Finalize
    return ts.tile.cast(acc / l_i[:, None], ts.bf16)


@ts.kernel
def saxpy(x: ts.Tensor["n", ts.f32],
          y: ts.Tensor["n", ts.f32],
          alpha: ts.f32) -> ts.Tensor["n", ts.f32]:
    """Simple SAXPY: y = alpha * x + y"""
    i = ts.tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
    return y
