"""``cooperative_reduction`` (programming-model-guide.md, "Tile Groups and
Synchronization"), as written and corrected.

As written it is a correct *single-group* reduction: launched with ``grid=1`` and
``group_size=G <= 128``, tile ``t`` sums ``data[t::G]`` sequentially, the group folds
its partial sums in a barrier-separated tree and tile 0's value is returned. With more
groups only group 0's sum is returned. The corrected kernel reduces with any number
of groups: each group's tile 0 adds its partial into ``total`` with ``+=`` (a reduce,
applied in group order).
"""

from __future__ import annotations

import numpy as np

import tessera as ts


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
def block_reduction(data: ts.Tensor["N", ts.f32], total: ts.Tensor[1, ts.f32]):
    """Sum of ``data`` over all groups (group size a power of two)."""
    ctx = ts.tile.context()
    shared_sum = ts.tile.alloc_shared((ctx.group_size,), ts.f32)
    local_sum = 0.0
    for i in ts.tile.range(ts.tile.linear_id(), N, ctx.grid[0] * ctx.group_size):
        local_sum += data[i]
    shared_sum[ts.tile.local_id()] = local_sum
    ts.tile.barrier()
    stride = ctx.group_size // 2
    while stride > 0:
        if ts.tile.local_id() < stride:
            shared_sum[ts.tile.local_id()] += shared_sum[ts.tile.local_id() + stride]
        ts.tile.barrier()
        stride //= 2
    if ts.tile.local_id() == 0:
        total[0] += shared_sum[0]


def main() -> None:
    rng = np.random.default_rng(5)
    data = rng.standard_normal(4096).astype(np.float32)
    exact = data.astype(np.float64).sum()
    s = cooperative_reduction(data, grid=1, group_size=128)
    # f32 sums of 4096 terms: |error| <= gamma_4096 * sum|x|
    bound = 4096 * 2.0 ** -24 * np.abs(data.astype(np.float64)).sum()
    assert abs(float(s) - exact) <= bound, (s, exact)
    total = np.zeros(1, np.float32)
    block_reduction(data, total, grid=16, group_size=64)
    assert abs(float(total[0]) - exact) <= bound, (total, exact)
    print(f"cooperative_reduction: {float(s):.6f}, block_reduction: {float(total[0]):.6f}, "
          f"exact {exact:.6f}")


if __name__ == "__main__":
    main()
