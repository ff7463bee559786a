"""Kernels with planted bugs, each beside its fix, for the sanitizer cases.

The line each sanitizer must report carries a ``# BUG: <kind>`` comment; ``PLANTED``
lists (name, buggy kernel, fixed kernel, launch keywords, argument factory, expected
result of the fix as a function of the arguments).
"""
# ruff: noqa: F821 - kernels name their dimensions free (N), the compiler binds them

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import tessera as ts


# race: tiles reverse a block through shared memory without a barrier
@ts.kernel
def reverse_no_barrier(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4,), ts.f32)
    lid = ts.tile.local_id()
    buf[lid] = x[ts.tile.linear_id()]
    out[ts.tile.linear_id()] = buf[3 - lid]  # BUG: race


@ts.kernel
def reverse_fixed(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4,), ts.f32)
    lid = ts.tile.local_id()
    buf[lid] = x[ts.tile.linear_id()]
    ts.tile.barrier()
    out[ts.tile.linear_id()] = buf[3 - lid]


# out of bounds: a stencil reads one element before the start
@ts.kernel
def diff_oob(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[i] - x[i - 1]  # BUG: out of bounds


@ts.kernel
def diff_fixed(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    if i > 0:
        out[i] = x[i] - x[i - 1]


# uninitialised read: a group sums slots that only half of its tiles wrote
@ts.kernel
def sum_half_written(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((8,), ts.f32)
    lid = ts.tile.local_id()
    if lid < 4:
        buf[lid] = x[lid]
    ts.tile.barrier()
    if lid == 0:
        out[0] = ts.tile.reduce_sum(buf[0:8], 0)  # BUG: uninitialised read


@ts.kernel
def sum_written(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((8,), ts.f32)
    lid = ts.tile.local_id()
    buf[lid] = x[lid]
    ts.tile.barrier()
    if lid == 0:
        out[0] = ts.tile.reduce_sum(buf[0:8], 0)


# async copy not waited: a tile multiplies the staged block before the copy completes
@ts.kernel
def scale_no_wait(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", "K", ts.f32]):
    smem = ts.tile.alloc_shared((8, 8), ts.f32)
    ts.tile.cp_async(smem, A[0:8, 0:8])
    ts.tile.cp_commit_group()
    out[0:8, 0:8] = smem * 2.0  # BUG: async copy not waited


@ts.kernel
def scale_wait(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", "K", ts.f32]):
    smem = ts.tile.alloc_shared((8, 8), ts.f32)
    ts.tile.cp_async(smem, A[0:8, 0:8])
    ts.tile.cp_commit_group()
    ts.tile.cp_wait_group(0)
    out[0:8, 0:8] = smem * 2.0


# divergent barrier: only the even tiles of a group synchronise
@ts.kernel
def even_barrier(x: ts.Tensor["N", ts.f32]):
    if ts.tile.local_id() % 2 == 0:
        ts.tile.barrier()  # BUG: divergent barrier
    x[ts.tile.linear_id()] = 2.0


@ts.kernel
def all_barrier(x: ts.Tensor["N", ts.f32]):
    ts.tile.barrier()
    x[ts.tile.linear_id()] = 2.0


# global write conflict: every tile stores its count into one element
@ts.kernel
def count_store(out: ts.Tensor["N", ts.f32]):
    out[0] = 1.0  # BUG: global write conflict


@ts.kernel
def count_reduce(out: ts.Tensor["N", ts.f32]):
    out[0] += 1.0


# misaligned access: a 4-wide vector load starting at 4i + 1
@ts.kernel
def vec_offset(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id() * 4
    v = ts.tile.load_vector(x[i + 1:i + 5], width=4)  # BUG: misaligned access
    ts.tile.store_vector(out[i:i + 4], v)


@ts.kernel
def vec_aligned(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id() * 4
    v = ts.tile.load_vector(x[i:i + 4], width=4)
    ts.tile.store_vector(out[i:i + 4], v)


# race between groups: group g reads what group g - 1 wrote in the same launch
@ts.kernel
def prefix_across_groups(x: ts.Tensor["N", ts.f32]):
    g = ts.tile.group_id()
    if g > 0:
        x[g] = x[g] + x[g - 1]  # BUG: race


@ts.kernel
def prefix_own_group(x: ts.Tensor["N", ts.f32]):
    g = ts.tile.group_id()
    x[g] = x[g] * 2.0


def _ar(n: int) -> np.ndarray:
    return np.arange(1, n + 1, dtype=np.float32)


def _z(n: int) -> np.ndarray:
    return np.zeros(n, np.float32)


@dataclass(frozen=True)
class Planted:
    """A planted bug: its kernels, launch, arguments and the fix's expected output
    (index of the argument the fix writes, and its expected value from the inputs)."""

    name: str
    buggy: Any
    fixed: Any
    launch: dict[str, Any]
    args: Callable[[], tuple[np.ndarray, ...]]
    out: int
    want: Callable[[tuple[np.ndarray, ...]], np.ndarray]


def _reversed_groups(a: tuple[np.ndarray, ...]) -> np.ndarray:
    return a[0].reshape(-1, 4)[:, ::-1].ravel()


PLANTED = [
    Planted("race.shared", reverse_no_barrier, reverse_fixed, dict(grid=2, group_size=4),
            lambda: (_ar(8), _z(8)), 1, _reversed_groups),
    Planted("out-of-bounds.global", diff_oob, diff_fixed, {}, lambda: (_ar(8), _z(8)), 1,
            lambda a: np.concatenate([[0.0], np.diff(a[0])]).astype(np.float32)),
    Planted("uninitialised-read.shared", sum_half_written, sum_written,
            dict(grid=1, group_size=8), lambda: (_ar(8), _z(8)), 1,
            lambda a: np.array([a[0].sum()] + [0.0] * 7, np.float32)),
    Planted("async-not-waited.read", scale_no_wait, scale_wait, dict(grid=1),
            lambda: (np.ones((8, 8), np.float32) * 3, np.zeros((8, 8), np.float32)), 1,
            lambda a: a[0] * 2),
    Planted("divergent-barrier.branch", even_barrier, all_barrier, dict(grid=2, group_size=4),
            lambda: (_z(8),), 0, lambda a: np.full(8, 2.0, np.float32)),
    Planted("global-write-conflict.store", count_store, count_reduce, dict(grid=6),
            lambda: (_z(1),), 0, lambda a: np.array([6.0], np.float32)),
    Planted("misaligned-access.vector", vec_offset, vec_aligned, dict(grid=4),
            lambda: (_ar(20), _z(20)), 1,
            lambda a: np.concatenate([a[0][:16], np.zeros(4, np.float32)])),
    Planted("race.across-groups", prefix_across_groups, prefix_own_group, dict(grid=4),
            lambda: (_ar(4),), 0, lambda a: np.arange(1, 5, dtype=np.float32) * 2),
]
