"""``memory_hierarchy_example`` (programming-model-guide.md, "Memory Hierarchy
Operations"), corrected.

As written the seed reads ``A[i, j]`` with ``i`` and ``j`` never defined: a compile
error naming ``i`` and its line. Here the tile reads the element at its origin into a
register, copies its ``64x64`` tile of ``A`` into swizzled shared memory
asynchronously, waits, and writes ``tile + corner`` to ``out``.
"""

from __future__ import annotations

import numpy as np

import tessera as ts


@ts.kernel
def memory_hierarchy_example(A: ts.Tensor["M", "N", ts.f32], out: ts.Tensor["M", "N", ts.f32]):
    # 1. Register allocation (tile-local)
    reg_value = ts.tile.alloc_register(ts.f32)

    # 2. Shared memory allocation (group-local)
    shared_tile = ts.tile.alloc_shared((64, 64), ts.f32, swizzle="xor")

    # 3. Global memory access
    i, j = block_m, block_n
    global_value = A[i, j]
    reg_value = global_value

    # 4. Async memory operations
    ts.tile.cp_async(shared_tile, A[block_m:block_m+64, block_n:block_n+64])
    ts.tile.cp_commit_group()
    ts.tile.cp_wait_group(0)

    out[block_m:block_m+64, block_n:block_n+64] = shared_tile + reg_value


def main() -> None:
    a = np.arange(128 * 192, dtype=np.float32).reshape(128, 192)
    out = np.zeros_like(a)
    memory_hierarchy_example(a, out, tile_shape=(64, 64))  # grid: one group per tile
    corners = np.repeat(np.repeat(a[::64, ::64], 64, 0), 64, 1)
    assert np.array_equal(out, a + corners)
    print("memory_hierarchy_example: ok")


if __name__ == "__main__":
    main()
