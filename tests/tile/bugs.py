"""Kernels with planted bugs, each beside its fix.

Every buggy kernel marks the line the sanitizer must report with a ``# BUG k: <kind>``
comment; ``BUGS`` lists (buggy kernel, fixed kernel, launch keywords, arguments).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import tessera as ts


# 1. missing barrier: tiles read their neighbour's shared slot in the same phase
@ts.kernel
def neighbour_no_barrier(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((8,), ts.f32)
    lid = ts.tile.local_id()
    buf[lid] = x[ts.tile.linear_id()]
    out[ts.tile.linear_id()] = buf[(lid + 1) % 8]  # BUG 1: race


@ts.kernel
def neighbour_fixed(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((8,), ts.f32)
    lid = ts.tile.local_id()
    buf[lid] = x[ts.tile.linear_id()]
    ts.tile.barrier()
    out[ts.tile.linear_id()] = buf[(lid + 1) % 8]


# 2. out-of-bounds read: the last tile reads one past the end
@ts.kernel
def shift_oob(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[i + 1]  # BUG 2: out of bounds


@ts.kernel
def shift_fixed(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    if i + 1 < N:
        out[i] = x[i + 1]


# 3. out-of-bounds write: the block store of the last tile runs past the end
@ts.kernel
def block_store_oob(x: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id() * 16 + 8
    x[i:i + 16] = ts.tile.zeros((16,), ts.f32)  # BUG 3: out of bounds


@ts.kernel
def block_store_fixed(x: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id() * 16
    x[i:i + 16] = ts.tile.zeros((16,), ts.f32)


# 4. divergent barrier: only some tiles of the group reach it
@ts.kernel
def half_barrier(x: ts.Tensor["N", ts.f32]):
    if ts.tile.local_id() < 2:
        ts.tile.barrier()  # BUG 4: divergent barrier
    x[ts.tile.linear_id()] = 1.0


@ts.kernel
def half_barrier_fixed(x: ts.Tensor["N", ts.f32]):
    ts.tile.barrier()
    x[ts.tile.linear_id()] = 1.0


# 5. uninitialised shared read
@ts.kernel
def read_uninit(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((16,), ts.f32)
    buf[0:8] = ts.tile.full((8,), 1.0, ts.f32)
    out[0:16] = buf  # BUG 5: uninitialised read


@ts.kernel
def read_init_fixed(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((16,), ts.f32)
    buf[0:16] = ts.tile.full((16,), 1.0, ts.f32)
    out[0:16] = buf


# 6. async copy read before its wait
@ts.kernel
def copy_no_wait(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", "K", ts.f32]):
    smem = ts.tile.alloc_shared((16, 16), ts.f32)
    ts.tile.cp_async(smem, A[0:16, 0:16])
    out[0:16, 0:16] = smem  # BUG 6: async copy not waited


@ts.kernel
def copy_wait_fixed(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", "K", ts.f32]):
    smem = ts.tile.alloc_shared((16, 16), ts.f32)
    ts.tile.cp_async(smem, A[0:16, 0:16])
    ts.tile.cp_wait_group(0)
    out[0:16, 0:16] = smem


# 7. cross-tile global write race: every tile stores its id to one element
@ts.kernel
def all_store_one(out: ts.Tensor["N", ts.int64]):
    out[0] = ts.tile.linear_id()  # BUG 7: global write conflict


@ts.kernel
def all_store_one_fixed(out: ts.Tensor["N", ts.int64]):
    out[0] += ts.tile.linear_id()


# 8. shared write/write race: every tile of the group writes slot 0
@ts.kernel
def shared_ww(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((8,), ts.f32)
    buf[0] = ts.tile.local_id() * 1.0  # BUG 8: race
    ts.tile.barrier()
    out[ts.tile.linear_id()] = buf[0]


@ts.kernel
def shared_ww_fixed(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((8,), ts.f32)
    if ts.tile.local_id() == 0:
        buf[0] = 7.0
    ts.tile.barrier()
    out[ts.tile.linear_id()] = buf[0]


# 9. out-of-bounds shared index
@ts.kernel
def shared_oob(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4,), ts.f32)
    buf[ts.tile.local_id()] = 1.0  # BUG 9: out of bounds
    ts.tile.barrier()
    out[ts.tile.linear_id()] = buf[0]


@ts.kernel
def shared_oob_fixed(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((8,), ts.f32)
    buf[ts.tile.local_id()] = 1.0
    ts.tile.barrier()
    out[ts.tile.linear_id()] = buf[0]


# 10. wrong cp_wait_group count in a two-stage pipeline
def _pipeline(A: Any, B: Any, C: Any, wait: int) -> None:
    smem_a = [ts.tile.alloc_shared((BM, BK), ts.f32), ts.tile.alloc_shared((BM, BK), ts.f32)]
    smem_b = [ts.tile.alloc_shared((BK, BN), ts.f32), ts.tile.alloc_shared((BK, BN), ts.f32)]
    stage = 0
    acc = ts.tile.zeros((BM, BN), ts.f32)
    ts.tile.cp_async(smem_a[stage], A[tile_m:tile_m + BM, 0:BK])
    ts.tile.cp_async(smem_b[stage], B[0:BK, tile_n:tile_n + BN])
    ts.tile.cp_commit_group()
    for k in ts.tile.range(BK, K, BK):
        ts.tile.cp_async(smem_a[1 - stage], A[tile_m:tile_m + BM, k:k + BK])
        ts.tile.cp_async(smem_b[1 - stage], B[k:k + BK, tile_n:tile_n + BN])
        ts.tile.cp_commit_group()
        ts.tile.cp_wait_group(wait)
        acc = ts.tile.mma(smem_a[stage], smem_b[stage], acc)  # BUG 10: async copy not waited
        stage = 1 - stage
    ts.tile.cp_wait_group(0)
    acc = ts.tile.mma(smem_a[stage], smem_b[stage], acc)
    C[tile_m:tile_m + BM, tile_n:tile_n + BN] = acc


@ts.kernel
def pipeline_wait2(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                   C: ts.Tensor["M", "N", ts.f32]):
    _pipeline(A, B, C, 2)


@ts.kernel
def pipeline_wait1(A: ts.Tensor["M", "K", ts.f32], B: ts.Tensor["K", "N", ts.f32],
                   C: ts.Tensor["M", "N", ts.f32]):
    _pipeline(A, B, C, 1)


# 11. barrier inside a loop whose trip count depends on the tile
@ts.kernel
def loop_barrier(x: ts.Tensor["N", ts.f32]):
    for _i in ts.tile.range(0, ts.tile.local_id()):
        ts.tile.barrier()  # BUG 11: divergent barrier
    x[ts.tile.linear_id()] = 1.0


@ts.kernel
def loop_barrier_fixed(x: ts.Tensor["N", ts.f32]):
    for _i in ts.tile.range(0, ts.tile.group_size()):
        ts.tile.barrier()
    x[ts.tile.linear_id()] = 1.0


# 12. reading another group's result: no sync exists between groups
@ts.kernel
def read_other_group(x: ts.Tensor["N", ts.f32]):
    g = ts.tile.group_id()
    x[g] = g * 1.0
    if g > 0:
        x[g] += x[g - 1]  # BUG 12: race


@ts.kernel
def read_own_group(x: ts.Tensor["N", ts.f32]):
    g = ts.tile.group_id()
    x[g] = g * 1.0
    x[g] += x[g]


# 13. misaligned vector load
@ts.kernel
def misaligned(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    v = ts.tile.load_vector(x[ts.tile.linear_id() * 4 + 1], width=4)  # BUG 13: misaligned access
    ts.tile.store_vector(out[ts.tile.linear_id() * 4], v)


@ts.kernel
def aligned(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    v = ts.tile.load_vector(x[ts.tile.linear_id() * 4], width=4)
    ts.tile.store_vector(out[ts.tile.linear_id() * 4], v)


# 14. shared read/write race: tile 0 publishes, the others read in the same phase
@ts.kernel
def publish_no_barrier(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((1,), ts.f32)
    if ts.tile.local_id() == 0:
        buf[0] = 3.0
    out[ts.tile.linear_id()] = buf[0]  # BUG 14: race


@ts.kernel
def publish_fixed(out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((1,), ts.f32)
    if ts.tile.local_id() == 0:
        buf[0] = 3.0
    ts.tile.barrier()
    out[ts.tile.linear_id()] = buf[0]


# 15. a store and a reduce of one element by different tiles
@ts.kernel
def store_and_reduce(out: ts.Tensor["N", ts.f32]):
    if ts.tile.linear_id() == 0:
        out[0] = 1.0
    out[0] += 1.0  # BUG 15: global write conflict


@ts.kernel
def reduce_only(out: ts.Tensor["N", ts.f32]):
    out[0] += 1.0


def _f(n: int) -> np.ndarray:
    return np.zeros(n, np.float32)


def _ar(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.float32)


#: (name, buggy, fixed, launch keywords, argument factory)
BUGS: list[tuple[str, Any, Any, dict[str, Any], Any]] = [
    ("missing barrier", neighbour_no_barrier, neighbour_fixed, dict(grid=2, group_size=8),
     lambda: (_ar(16), _f(16))),
    ("oob read", shift_oob, shift_fixed, {}, lambda: (_ar(16), _f(16))),
    ("oob write", block_store_oob, block_store_fixed, dict(grid=4), lambda: (_ar(64),)),
    ("divergent barrier", half_barrier, half_barrier_fixed, dict(grid=2, group_size=4),
     lambda: (_f(8),)),
    ("uninitialised read", read_uninit, read_init_fixed, dict(grid=1), lambda: (_f(16),)),
    ("async before wait", copy_no_wait, copy_wait_fixed, dict(grid=1),
     lambda: (np.ones((16, 16), np.float32), np.zeros((16, 16), np.float32))),
    ("cross-tile write race", all_store_one, all_store_one_fixed, dict(grid=4),
     lambda: (np.zeros(4, np.int64),)),
    ("shared write/write race", shared_ww, shared_ww_fixed, dict(grid=1, group_size=4),
     lambda: (_f(4),)),
    ("oob shared index", shared_oob, shared_oob_fixed, dict(grid=2, group_size=8),
     lambda: (_f(16),)),
    ("wrong cp_wait_group", pipeline_wait2, pipeline_wait1,
     dict(tile_shape=(16, 16, 8)),
     lambda: (np.ones((32, 32), np.float32), np.ones((32, 32), np.float32),
              np.zeros((32, 32), np.float32))),
    ("barrier in tile-dependent loop", loop_barrier, loop_barrier_fixed,
     dict(grid=1, group_size=4), lambda: (_f(4),)),
    ("read another group's result", read_other_group, read_own_group, dict(grid=8),
     lambda: (_f(8),)),
    ("misaligned vector", misaligned, aligned, dict(grid=4), lambda: (_ar(20), _f(20))),
    ("shared read/write race", publish_no_barrier, publish_fixed, dict(grid=2, group_size=4),
     lambda: (_f(8),)),
    ("store and reduce", store_and_reduce, reduce_only, dict(grid=4), lambda: (_f(4),)),
]
