"""Tricky but correct kernels: the sanitizers must stay quiet in every schedule.

``CASES`` lists (name, kernel, launch keywords, argument factory, reference): the
reference takes the factory's fresh arrays and returns the expected value of the
array the kernel writes (the last argument unless the factory aliases), computed
with NumPy independently of the simulator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import tessera as ts


# 1. shared memory reused across barriers: write, sync, read a neighbour, sync, rewrite
@ts.kernel
def barrier_reuse(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4,), ts.f32)
    lid = ts.tile.local_id()
    i = ts.tile.linear_id()
    buf[lid] = x[i]
    ts.tile.barrier()
    v = buf[(lid + 1) % 4]
    ts.tile.barrier()
    buf[lid] = v * 2.0
    ts.tile.barrier()
    out[i] = buf[(lid + 3) % 4]


# 2. stores at (3 i) mod N: distinct for N coprime to 3, though not a plain slice
@ts.kernel
def modular_writes(out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[(3 * i) % N] = i * 1.0


# 3. double buffering: each step copies the next row block while summing this one
@ts.kernel
def double_buffered_sum(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", ts.f32]):
    bufs = [ts.tile.alloc_shared((1, 4), ts.f32), ts.tile.alloc_shared((1, 4), ts.f32)]
    r = ts.tile.linear_id()
    ts.tile.cp_async(bufs[0], A[r:r + 1, 0:4])
    ts.tile.cp_commit_group()
    acc = ts.tile.zeros((1,), ts.f32)
    stage = 0
    for k in ts.tile.range(4, K, 4):
        ts.tile.cp_async(bufs[1 - stage], A[r:r + 1, k:k + 4])
        ts.tile.cp_commit_group()
        ts.tile.cp_wait_group(1)
        acc = acc + ts.tile.row_sum(bufs[stage])
        stage = 1 - stage
    ts.tile.cp_wait_group(0)
    acc = acc + ts.tile.row_sum(bufs[stage])
    out[r:r + 1] = acc


# 4. one array passed as two read-only parameters
@ts.kernel
def read_only_alias(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32],
                    out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[i] + y[(i + 1) % N]


# 5. an in-place update through two names: each tile reads only what it writes
@ts.kernel
def in_place_alias(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[i] * 2.0 + 1.0


# 6. a scatter through a permutation
@ts.kernel
def permutation_scatter(perm: ts.Tensor["N", ts.int64], x: ts.Tensor["N", ts.f32],
                        out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[perm[i]] = x[i]


# 7. a gather with repeated indices (many tiles read one element)
@ts.kernel
def repeated_gather(x: ts.Tensor["N", ts.f32], idx: ts.Tensor["N", ts.int64],
                    out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[idx[i]]


# 8. every tile of every group adds into one total, in two ops
@ts.kernel
def total_twice(x: ts.Tensor["N", ts.f32], out: ts.Tensor["M", ts.f32]):
    i = ts.tile.linear_id()
    out[0] += x[i]
    out[0] += 1.0


# 9. tile 0 copies and waits; a barrier publishes the copy to its group
@ts.kernel
def publish_copy(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", ts.f32]):
    smem = ts.tile.alloc_shared((4, 8), ts.f32)
    lid = ts.tile.local_id()
    if lid == 0:
        ts.tile.cp_async(smem, A[0:4, 0:8])
        ts.tile.cp_wait_group(0)
    ts.tile.barrier()
    out[lid] = smem[(lid + 1) % 4, 2]


# 10. interleaved views of one array (a[::2], a[1::2]), both written
@ts.kernel
def interleaved(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    x[i] = 1.0
    y[i] = 2.0


# 11. vector loads from rows padded to a multiple of the width
@ts.kernel
def padded_rows(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", "C", ts.f32]):
    r = ts.tile.linear_id()
    v = ts.tile.load_vector(x[r, 4], width=4)
    ts.tile.store_vector(out[r, 0], v)


# 12. a group exchanges values through global memory across a barrier
@ts.kernel
def group_exchange(out: ts.Tensor["N", ts.f32]):
    g = ts.tile.group_id()
    lid = ts.tile.local_id()
    out[g * 4 + lid] = lid * 1.0 + g
    ts.tile.barrier()
    v = out[g * 4 + (lid + 1) % 4]
    ts.tile.barrier()
    out[g * 4 + lid] = v


def _ar(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) * 0.5 + 1.0


def _f(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def _barrier_ref(x: np.ndarray, _out: np.ndarray) -> np.ndarray:
    g = x.reshape(-1, 4)
    doubled = np.roll(g, -1, axis=1) * np.float32(2)
    return np.roll(doubled, 1, axis=1).reshape(-1)


def _modular_ref(out: np.ndarray) -> np.ndarray:
    ref = out.copy()
    for i in range(out.size):
        ref[(3 * i) % out.size] = i
    return ref


def _rowsum_ref(a: np.ndarray, _out: np.ndarray) -> np.ndarray:
    # blocks of 4 summed by the tile's tree, then added in order in float32
    acc = np.zeros(a.shape[0], np.float32)
    for k in range(0, a.shape[1], 4):
        acc = acc + a[:, k:k + 4].astype(np.float64).sum(axis=1).astype(np.float32)
    return acc


def _interleaved_args() -> tuple[np.ndarray, ...]:
    a = _f(16)
    return a[0::2], a[1::2]


def _total_ref(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    ref = out.copy()
    for v in x:  # group order: each tile's contribution, then the +1.0 of every tile
        ref[0] = np.float32(ref[0] + v)
    for _ in x:
        ref[0] = np.float32(ref[0] + np.float32(1))
    return ref


def _exchange_ref(out: np.ndarray) -> np.ndarray:
    g = np.arange(out.size // 4, dtype=np.float32)[:, None]
    first = np.arange(4, dtype=np.float32)[None, :] + g
    return np.roll(first, -1, axis=1).reshape(-1)


PERM = np.array([3, 0, 6, 1, 7, 2, 5, 4], np.int64)
IDX = np.array([2, 2, 0, 7, 7, 7, 1, 2], np.int64)

#: (name, kernel, launch keywords, argument factory, reference of the written array)
CASES: list[tuple[str, Any, dict[str, Any], Any, Any]] = [
    ("barrier-separated reuse", barrier_reuse, dict(grid=2, group_size=4),
     lambda: (_ar(8), _f(8)), _barrier_ref),
    ("disjoint modular writes", modular_writes, dict(grid=8), lambda: (_f(8),),
     _modular_ref),
    ("double buffering", double_buffered_sum, dict(grid=4),
     lambda: (_ar(4, 16), _f(4)), _rowsum_ref),
    ("read-only aliasing", read_only_alias, dict(grid=8),
     lambda: (lambda a: (a, a, _f(8)))(_ar(8)),
     lambda x, _y, _o: x + np.roll(x, -1)),
    ("in-place aliasing", in_place_alias, dict(grid=4, group_size=2),
     lambda: (lambda a: (a, a))(_ar(8)),
     lambda x, _o: x * np.float32(2) + np.float32(1)),
    ("permutation scatter", permutation_scatter, dict(grid=8),
     lambda: (PERM.copy(), _ar(8), _f(8)),
     lambda p, x, o: (lambda r: (r.__setitem__(p, x), r)[1])(o.copy())),
    ("repeated gather", repeated_gather, dict(grid=4, group_size=2),
     lambda: (_ar(8), IDX.copy(), _f(8)), lambda x, i, _o: x[i]),
    ("one total from every group", total_twice, dict(grid=8),
     lambda: (_ar(8), _f(1)), _total_ref),
    ("copy published by a barrier", publish_copy, dict(grid=1, group_size=4),
     lambda: (_ar(4, 8), _f(4)), lambda a, _o: np.roll(a[:, 2], -1)),
    ("interleaved views", interleaved, dict(grid=8), _interleaved_args,
     lambda x, y: np.full(8, 2, np.float32)),
    ("padded rows", padded_rows, dict(grid=3),
     lambda: (_ar(3, 8), _f(3, 8)),
     lambda x, o: (lambda r: (r.__setitem__((slice(None), slice(0, 4)), x[:, 4:8]), r)[1])(
         o.copy())),
    ("exchange inside a group", group_exchange, dict(grid=3, group_size=4),
     lambda: (_f(12),), _exchange_ref),
]
