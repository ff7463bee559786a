"""Planted bugs whose report once depended on the schedule or named the wrong element.

Each buggy kernel marks the line the sanitizer must report with a ``# BUG k: <kind>``
comment; ``BUGS`` lists (name, buggy kernel, fixed kernel, launch keywords, argument
factory). Factories may return overlapping arrays (one array passed as two
parameters); every call builds fresh arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import tessera as ts


# 1. a data-dependent scatter with a repeated index: two groups store one element
@ts.kernel
def scatter_repeat(idx: ts.Tensor["N", ts.int64], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[idx[i]] = i * 1.0  # BUG 1: global write conflict


@ts.kernel
def scatter_add(idx: ts.Tensor["N", ts.int64], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[idx[i]] += i * 1.0


# 2. every group stores the same few elements in a loop
@ts.kernel
def loop_store_shared_slots(out: ts.Tensor["N", ts.f32]):
    for j in ts.tile.range(0, 2):
        out[j] = ts.tile.linear_id() * 1.0  # BUG 2: global write conflict


@ts.kernel
def loop_store_own_slots(out: ts.Tensor["N", ts.f32]):
    for j in ts.tile.range(0, 2):
        out[2 * ts.tile.linear_id() + j] = ts.tile.linear_id() * 1.0


# 3. reductions from every group (a sequential rerun), then a store conflict
@ts.kernel
def reduce_then_conflict(out: ts.Tensor["N", ts.f32]):
    for _k in ts.tile.range(0, 3):
        out[0] += 1.0
    out[1] = ts.tile.linear_id() * 1.0  # BUG 3: global write conflict


@ts.kernel
def reduce_then_own_store(out: ts.Tensor["N", ts.f32]):
    for _k in ts.tile.range(0, 3):
        out[0] += 1.0
    out[ts.tile.linear_id() + 1] = ts.tile.linear_id() * 1.0


# 4. one array passed as input and output: a tile overwrites what a neighbour reads
@ts.kernel
def shift_in_place(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[(i + 1) % N] + 1.0  # BUG 4: race


@ts.kernel
def scale_in_place(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[i] + 1.0


# 5. overlapping slices of one array (x = a[:-1], out = a[1:]): tile i reads what
# tile i - 1 wrote
@ts.kernel
def copy_overlapping(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    v = x[i]  # BUG 5: race
    out[i] = v * 2.0


@ts.kernel
def copy_same_element(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    v = x[(i + 1) % N]  # the element out[i] names: each tile updates its own
    out[i] = v * 2.0


# 6. two parameters of one array both written, at different positions per tile
@ts.kernel
def two_names_store(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    x[i] = 1.0
    y[(i + N - 1) % N] = 2.0  # BUG 6: global write conflict


@ts.kernel
def two_names_store_fixed(x: ts.Tensor["N", ts.f32], y: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    x[i] = 1.0
    y[i] = 2.0


# 7. a read through one name of what another group wrote through the other
@ts.kernel
def read_after_alias_write(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = 5.0
    v = x[(i + N - 1) % N]  # BUG 7: race
    out[i] = v


@ts.kernel
def read_own_alias_write(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = 5.0
    v = x[i]
    out[i] = v + 1.0


# 8. tile 0 copies and waits, its group reads without a barrier
@ts.kernel
def copy_waited_no_barrier(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", ts.f32]):
    smem = ts.tile.alloc_shared((4, 16), ts.f32)
    lid = ts.tile.local_id()
    if lid == 0:
        ts.tile.cp_async(smem, A[0:4, 0:16])
        ts.tile.cp_wait_group(0)
    out[lid] = smem[lid, 0]  # BUG 8: race


@ts.kernel
def copy_waited_barrier(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", ts.f32]):
    smem = ts.tile.alloc_shared((4, 16), ts.f32)
    lid = ts.tile.local_id()
    if lid == 0:
        ts.tile.cp_async(smem, A[0:4, 0:16])
        ts.tile.cp_wait_group(0)
    ts.tile.barrier()
    out[lid] = smem[lid, 0]


# 9. each tile copies its row and reads its neighbour's, waiting only for its own
@ts.kernel
def rows_neighbour_no_barrier(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", ts.f32]):
    smem = ts.tile.alloc_shared((4, 16), ts.f32)
    lid = ts.tile.local_id()
    ts.tile.cp_async(smem[lid:lid + 1, 0:16], A[lid:lid + 1, 0:16])
    ts.tile.cp_wait_group(0)
    out[lid] = smem[(lid + 1) % 4, 0]  # BUG 9: race


@ts.kernel
def rows_neighbour_barrier(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", ts.f32]):
    smem = ts.tile.alloc_shared((4, 16), ts.f32)
    lid = ts.tile.local_id()
    ts.tile.cp_async(smem[lid:lid + 1, 0:16], A[lid:lid + 1, 0:16])
    ts.tile.cp_wait_group(0)
    ts.tile.barrier()
    out[lid] = smem[(lid + 1) % 4, 0]


# 10. a gather through an index past the end
@ts.kernel
def gather(x: ts.Tensor["N", ts.f32], idx: ts.Tensor["N", ts.int64],
           out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[idx[i]]  # BUG 10: out of bounds


@ts.kernel
def gather_clamped(x: ts.Tensor["N", ts.f32], idx: ts.Tensor["N", ts.int64],
                   out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[min(idx[i], N - 1)]


# 11. a gather through a negative index
@ts.kernel
def gather_negative(x: ts.Tensor["N", ts.f32], idx: ts.Tensor["N", ts.int64],
                    out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[idx[i]]  # BUG 11: out of bounds


@ts.kernel
def gather_wrapped(x: ts.Tensor["N", ts.f32], idx: ts.Tensor["N", ts.int64],
                   out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = x[(idx[i] + N) % N]


# 12. a scatter through an index past the end
@ts.kernel
def scatter_oob(idx: ts.Tensor["N", ts.int64], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[idx[i]] = 1.0  # BUG 12: out of bounds


@ts.kernel
def scatter_guarded(idx: ts.Tensor["N", ts.int64], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    if idx[i] < N:
        out[idx[i]] = 1.0


# 13. a gather of a row of a matrix through a bad row index
@ts.kernel
def gather_rows(x: ts.Tensor["R", "C", ts.f32], idx: ts.Tensor["R", ts.int64],
                out: ts.Tensor["R", "C", ts.f32]):
    i = ts.tile.linear_id()
    out[i, 0:C] = x[idx[i], 0:C]  # BUG 13: out of bounds


@ts.kernel
def gather_rows_fixed(x: ts.Tensor["R", "C", ts.f32], idx: ts.Tensor["R", ts.int64],
                      out: ts.Tensor["R", "C", ts.f32]):
    i = ts.tile.linear_id()
    out[i, 0:C] = x[idx[i] % R, 0:C]


# 14. a vector load whose row pitch (5 floats) breaks the 16-byte alignment
@ts.kernel
def pitch_load(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", "C", ts.f32]):
    r = ts.tile.linear_id()
    v = ts.tile.load_vector(x[r, 0], width=4)  # BUG 14: misaligned access
    out[r, 0:4] = v


@ts.kernel
def pitch_load_scalar(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", "C", ts.f32]):
    r = ts.tile.linear_id()
    out[r, 0:4] = x[r, 0:4]


# 15. a vector store with the same broken pitch
@ts.kernel
def pitch_store(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", "C", ts.f32]):
    r = ts.tile.linear_id()
    v = x[r, 0:4]
    ts.tile.store_vector(out[r, 0], v)  # BUG 15: misaligned access


@ts.kernel
def pitch_store_scalar(x: ts.Tensor["R", "C", ts.f32], out: ts.Tensor["R", "C", ts.f32]):
    r = ts.tile.linear_id()
    out[r, 0:4] = x[r, 0:4]


# 16. a vector load from a shared buffer whose rows are 6 floats long
@ts.kernel
def shared_pitch(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4, 6), ts.f32)
    lid = ts.tile.local_id()
    buf[lid, 0:6] = ts.tile.full((6,), 1.0, ts.f32)
    v = ts.tile.load_vector(buf[lid, 0], width=4)  # BUG 16: misaligned access
    out[lid * 4:lid * 4 + 4] = v


@ts.kernel
def shared_pitch_padded(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    buf = ts.tile.alloc_shared((4, 8), ts.f32)
    lid = ts.tile.local_id()
    buf[lid, 0:8] = ts.tile.full((8,), 1.0, ts.f32)
    v = ts.tile.load_vector(buf[lid, 0], width=4)
    out[lid * 4:lid * 4 + 4] = v


# 17. even tiles store one element inside a branch
@ts.kernel
def branch_conflict(out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    if i % 2 == 0:
        out[0] = i * 1.0  # BUG 17: global write conflict


@ts.kernel
def branch_one_writer(out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    if i == 2:
        out[0] = i * 1.0


# 18. block stores whose windows overlap their neighbour's
@ts.kernel
def overlapping_blocks(out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id() * 4
    out[i:i + 8] = ts.tile.full((8,), 1.0, ts.f32)  # BUG 18: global write conflict


@ts.kernel
def adjacent_blocks(out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id() * 8
    out[i:i + 8] = ts.tile.full((8,), 1.0, ts.f32)


# 19. a read of an element that other groups reduce into (met as the next group's
# reduce after this group's read)
@ts.kernel
def read_partial_total(x: ts.Tensor["N", ts.f32], out: ts.Tensor["M", ts.f32]):
    i = ts.tile.linear_id()
    out[0] += x[i]  # BUG 19: race
    out[i + 1] = out[0]


@ts.kernel
def total_only(x: ts.Tensor["N", ts.f32], out: ts.Tensor["M", ts.f32]):
    i = ts.tile.linear_id()
    out[0] += x[i]
    out[i + 1] = x[i]


# 20. a launch that fails after writing: the written array must be left unchanged
@ts.kernel
def write_then_overrun(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = 7.0
    out[i] = x[i + 1]  # BUG 20: out of bounds


@ts.kernel
def write_then_read_own(x: ts.Tensor["N", ts.f32], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = 7.0
    out[i] = x[i]


# 21. a tile reads its own copy without waiting, in a group whose others wait
@ts.kernel
def own_copy_unwaited(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", ts.f32]):
    smem = ts.tile.alloc_shared((4, 16), ts.f32)
    lid = ts.tile.local_id()
    ts.tile.cp_async(smem[lid:lid + 1, 0:16], A[lid:lid + 1, 0:16])
    ts.tile.cp_commit_group()
    out[lid] = smem[lid, 3]  # BUG 21: async copy not waited


@ts.kernel
def own_copy_waited(A: ts.Tensor["M", "K", ts.f32], out: ts.Tensor["M", ts.f32]):
    smem = ts.tile.alloc_shared((4, 16), ts.f32)
    lid = ts.tile.local_id()
    ts.tile.cp_async(smem[lid:lid + 1, 0:16], A[lid:lid + 1, 0:16])
    ts.tile.cp_commit_group()
    ts.tile.cp_wait_group(0)
    out[lid] = smem[lid, 3]


# 22. a scatter whose repeated index lands in one group: two of its tiles in one op
@ts.kernel
def scatter_in_group(idx: ts.Tensor["N", ts.int64], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[idx[i]] = 1.0  # BUG 22: global write conflict


@ts.kernel
def scatter_own_slot(idx: ts.Tensor["N", ts.int64], out: ts.Tensor["N", ts.f32]):
    i = ts.tile.linear_id()
    out[i] = idx[i] * 1.0


def _f(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def _ar(*shape: int) -> np.ndarray:
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)


def _same(n: int) -> tuple[np.ndarray, np.ndarray]:
    a = _ar(n)
    return a, a


def _shifted(n: int) -> tuple[np.ndarray, np.ndarray]:
    a = _ar(n + 1)
    return a[:-1], a[1:]


def _rows() -> tuple[np.ndarray, np.ndarray]:
    return np.ones((4, 16), np.float32), _f(4)


def _idx(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


#: (name, buggy, fixed, launch keywords, argument factory)
BUGS: list[tuple[str, Any, Any, dict[str, Any], Any]] = [
    ("scatter with a repeated index", scatter_repeat, scatter_add, dict(grid=8),
     lambda: (_idx(0, 1, 2, 3, 4, 5, 6, 2), _f(8))),
    ("groups store one slot in a loop", loop_store_shared_slots, loop_store_own_slots,
     dict(grid=4), lambda: (_f(8),)),
    ("store conflict after a group-order rerun", reduce_then_conflict,
     reduce_then_own_store, dict(grid=4), lambda: (_f(5),)),
    ("in-place shift", shift_in_place, scale_in_place, dict(grid=8), lambda: _same(8)),
    ("overlapping slices", copy_overlapping, copy_same_element, dict(grid=8),
     lambda: _shifted(8)),
    ("two names stored", two_names_store, two_names_store_fixed, dict(grid=8),
     lambda: _same(8)),
    ("read through another name", read_after_alias_write, read_own_alias_write,
     dict(grid=8), lambda: _same(8)),
    ("waited copy, no barrier", copy_waited_no_barrier, copy_waited_barrier,
     dict(grid=1, group_size=4), _rows),
    ("neighbour's copied row, no barrier", rows_neighbour_no_barrier,
     rows_neighbour_barrier, dict(grid=1, group_size=4), _rows),
    ("gather past the end", gather, gather_clamped, dict(grid=8),
     lambda: (_ar(8), _idx(0, 1, 2, 3, 4, 99, 6, 7), _f(8))),
    ("gather at a negative index", gather_negative, gather_wrapped,
     dict(grid=4, group_size=2), lambda: (_ar(8), _idx(0, 1, 2, -3, 4, 5, 6, 7), _f(8))),
    ("scatter past the end", scatter_oob, scatter_guarded, dict(grid=8),
     lambda: (_idx(0, 1, 2, 3, 4, 5, 6, 12), _f(8))),
    ("row gather past the end", gather_rows, gather_rows_fixed, dict(grid=4),
     lambda: (_ar(4, 8), _idx(3, 2, 7, 0), _f(4, 8))),
    ("vector load across a row pitch", pitch_load, pitch_load_scalar, dict(grid=4),
     lambda: (_ar(4, 5), _f(4, 5))),
    ("vector store across a row pitch", pitch_store, pitch_store_scalar, dict(grid=4),
     lambda: (_ar(4, 5), _f(4, 5))),
    ("shared vector load across a row pitch", shared_pitch, shared_pitch_padded,
     dict(grid=1, group_size=4), lambda: (_f(16), _f(16))),
    ("store in a branch", branch_conflict, branch_one_writer, dict(grid=4),
     lambda: (_f(4),)),
    ("overlapping block stores", overlapping_blocks, adjacent_blocks, dict(grid=4),
     lambda: (_f(40),)),
    ("read of a partial total", read_partial_total, total_only, dict(grid=4),
     lambda: (_ar(4), _f(5))),
    ("failure after a write", write_then_overrun, write_then_read_own, dict(grid=8),
     lambda: (_ar(8), _f(8) + 3.0)),
    ("own copy not waited", own_copy_unwaited, own_copy_waited,
     dict(grid=1, group_size=4), _rows),
    ("scatter inside one group", scatter_in_group, scatter_own_slot,
     dict(grid=2, group_size=4), lambda: (_idx(5, 1, 1, 0, 2, 3, 4, 6), _f(8))),
]
